// Porcupine (chaos/porcupine/, the checker of etcd's own robustness tests) on synthetic histories:
// it must pass a linearizable history and fail one where two owners incremented the etcd counter
// from the same value, or a fenced register accepted an older token, writing its visualisation.
// Builds the Go program (cached), so it needs the Go toolchain (CI installs it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkLinearizable, type LinearOp } from '../chaos/porcupine.js';

const op = (client: number, call: number, ret: number, o: LinearOp['op'], value: number, extra: Partial<LinearOp> = {}): LinearOp => ({
  client,
  call,
  ret,
  op: o,
  value,
  ok: true,
  ...extra,
});

test('porcupine: a guarded counter and a fenced register are linearizable; two owners at once, or an older token accepted, are not', {
  timeout: 300_000,
}, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'chaos-porcupine-test-'));
  try {
    // One owner after the other: read 0, inc to 1; read 1, inc to 2 (the second inc never returned).
    const good = [op(0, 0, 1, 'read', 0), op(0, 2, 3, 'inc', 1), op(1, 4, 5, 'read', 1), op(1, 6, Infinity, 'inc', 2)];
    // Two owners both read 0 and both incremented to 1: a lost update.
    const twoOwners = [op(0, 0, 1, 'read', 0), op(1, 0.5, 1.5, 'read', 0), op(0, 2, 3, 'inc', 1), op(1, 2.5, 3.5, 'inc', 1)];
    const fenced = [
      op(0, 0, 1, 'read', 0, { token: '10' }),
      op(0, 2, 3, 'write', 1, { token: '10' }),
      op(1, 4, 5, 'read', 1, { token: '12' }),
      op(0, 6, 7, 'write', 2, { token: '10', ok: false }), // refused: 10 < 12
    ];
    // The same, but the stale write was accepted.
    const stale = fenced.map((o, i) => (i === 3 ? { ...o, ok: true } : o));
    const results = await checkLinearizable(
      [
        { name: 'good-counter', model: 'counter', ops: good },
        { name: 'two-owners', model: 'counter', ops: twoOwners },
        { name: 'good-fenced', model: 'fenced-register', ops: fenced },
        { name: 'stale-accepted', model: 'fenced-register', ops: stale },
      ],
      join(dir, 'result.json'),
    );
    assert.deepEqual(
      results.map((r) => [r.name, r.result]),
      [
        ['good-counter', 'Ok'],
        ['two-owners', 'Illegal'],
        ['good-fenced', 'Ok'],
        ['stale-accepted', 'Illegal'],
      ],
    );
    for (const r of results.filter((x) => x.result !== 'Ok')) {
      assert.equal(r.visualization, join(dir, `${r.name}.html`));
      assert.ok(existsSync(r.visualization!), `${r.visualization} written`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
