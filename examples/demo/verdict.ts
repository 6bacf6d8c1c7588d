// The demo's verdict: the invariants over the whole run, the database's own check, the summary.
import type { Demo } from './demo.js';

/** Invariants over the whole run. */
export function finalChecks(demo: Demo): void {
  const fifoScenes = [...new Set(demo.acquisitions.map((a) => a.scene))];
  const fifoBad = fifoScenes.filter((sc) => !demo.fifo(sc).ok);
  demo.checks.unshift(
    {
      label: 'FIFO order held',
      ok: fifoBad.length === 0 && demo.acquisitions.length > 0,
      detail: `${demo.acquisitions.length} acquisitions, each in CreateRevision order${fifoBad.length ? `; not in scene ${fifoBad.join(', ')}` : ''}`,
    },
    (() => {
      const tokens = demo.acquisitions.map((a) => a.token);
      const ok = tokens.length > 0 && tokens.every((t, i) => i === 0 || t > tokens[i - 1]!) && demo.ledger.tokensStrictlyIncreasing();
      return {
        label: 'tokens strictly increasing',
        ok,
        detail: `${tokens[0]} … ${tokens[tokens.length - 1]} over ${tokens.length} holders and the ledger`,
      };
    })(),
    (() => {
      const d = demo.ledger.doubleApplied();
      return {
        label: 'double-applied writes',
        ok: d === 0,
        value: String(d),
        detail: `${demo.ledger.entries.length} charges applied once each`,
      };
    })(),
  );
  demo.check('no lock or session lost unexpectedly', demo.troubles.length === 0, demo.troubles.join('; ') || undefined);
}

/** With PostgreSQL: the database holds exactly the charges the story accepted, in token order. */
export async function databaseCheck(demo: Demo): Promise<void> {
  if (!demo.pgLedger) return;
  const rows = await demo.pgLedger.charges();
  const want = demo.ledger.entries.map((e) => `${e.job.id}@${e.token}`).join(',');
  const ok = rows.map((r) => `${r.job}@${r.token}`).join(',') === want && rows.every((r, i) => i === 0 || r.token > rows[i - 1]!.token);
  demo.check('PostgreSQL holds the accepted charges, in token order', ok, `${rows.length} rows in its charges table`);
}

export function summary(demo: Demo, error: unknown): boolean {
  const { n } = demo;
  const allOk = error === undefined && demo.checks.every((c) => c.ok);
  if (!n.quiet) n.always('');
  n.always(n.bold(`Invariants checked (${demo.s.mode} mode, ${(n.now() / 1000).toFixed(1)} s):`));
  for (const c of demo.checks) {
    const mark = c.ok ? n.green('✓') : n.red('✗');
    const value = c.value ?? (c.ok ? 'yes' : 'NO');
    n.always(`  ${mark} ${c.label}: ${c.ok ? value : n.red(value)}${c.detail ? n.dim(`  (${c.detail})`) : ''}`);
  }
  if (error !== undefined)
    n.always(`  ${n.red('✗')} demo ran to the end: ${n.red('NO')}  (${error instanceof Error ? error.message : String(error)})`);
  n.always(allOk ? n.green(n.bold('All invariants held.')) : n.red(n.bold('Some invariants FAILED.')));
  return allOk;
}
