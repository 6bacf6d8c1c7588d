// `etcd-concurrency elect <name> <proposal>` campaigns; `elect --listen <name>` reports every leader change.
import { Election, observeLeader, Session, type Client, type LeaderEvent } from '../index.js';
import { COMMON, COMMON_HELP, connectTo, nameArg, parse, ttlArg } from './options.js';
import { EXIT, print, printJson, token, UsageError, warn } from './output.js';
import { firstAborted, Interrupts } from './signals.js';
import { METRICS_HELP, startMetrics } from './metrics.js';

export const ELECT_HELP = `Usage: etcd-concurrency elect <name> <proposal> [options]
       etcd-concurrency elect --listen <name> [options]

Campaigns in election <name> with the value <proposal>; once leading, prints the leader key and
its term (the fencing token) and leads until interrupted (Ctrl-C), then resigns so the next
candidate takes over at once. Interoperates with \`etcdctl elect\`.

With --listen, prints the current leader and then every change, one line each:
  leader key=<key> term=<token> lease=<hex> value=<value>
  no leader
(values with spaces or quotes are JSON-quoted).

Options:
  --ttl <seconds>         lease TTL: how long leadership outlives a crashed leader (default 30, min 2)
  -l, --listen            observe instead of campaigning
  --json                  one JSON object per line instead
${METRICS_HELP}

${COMMON_HELP}

Exit status: 0 after resigning or ending --listen on an interrupt; 2 bad usage; 3 leadership lost;
130/143 interrupted (SIGINT/SIGTERM) before leading; 1 any other error.

Examples:
  etcd-concurrency elect services/scheduler "$(hostname)"
  etcd-concurrency elect --listen services/scheduler --json`;

export async function electCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    ...COMMON,
    ttl: { type: 'string' },
    listen: { type: 'boolean', short: 'l' },
    json: { type: 'boolean' },
    metrics: { type: 'string' },
  });
  if (values.help) {
    print(ELECT_HELP);
    return EXIT.ok;
  }
  const name = nameArg(positionals[0], 'election name');
  const json = values.json ?? false;
  const expected = values.listen ? 1 : 2;
  if (positionals.length < expected) throw new UsageError('missing the proposal (the value to campaign with)');
  if (positionals.length > expected) throw new UsageError(`unexpected argument "${positionals[expected]}"`);
  if (values.listen && values.ttl !== undefined) throw new UsageError('--ttl only applies when campaigning, not with --listen');
  const ttl = ttlArg(values.ttl, 30);

  const metrics = values.metrics === undefined ? undefined : await startMetrics(values.metrics);
  // One election per process: a bounded attribute, so the series carry its name.
  const client = await connectTo(values, metrics ? { meterProvider: metrics.meterProvider, nameAttribute: true } : {}).catch(async (err: unknown) => {
    await metrics?.close();
    throw err;
  });
  const interrupts = new Interrupts();
  try {
    if (values.listen) return await listen(client, name, interrupts, json);
    return await campaign(client, name, positionals[1]!, ttl, interrupts, json);
  } finally {
    interrupts.dispose();
    await client.close();
    await metrics?.close();
  }
}

async function campaign(client: Client, name: string, proposal: string, ttl: number, interrupts: Interrupts, json: boolean): Promise<number> {
  const session = await Session.create(client, { ttl, signal: interrupts.signal });
  try {
    if (session.ttl > ttl) warn(`etcd raised the lease TTL from ${ttl}s to ${session.ttl}s (its minimum for this cluster)`);
    const leader = await new Election(session, name).campaign(proposal, { signal: interrupts.signal });
    const lease = session.leaseId.toString(16);
    if (json) printJson({ key: leader.key, term: leader.fencingToken, lease, value: leader.value });
    else print(`leader key=${leader.key} term=${leader.fencingToken} lease=${lease} value=${token(leader.value)}`);
    const first = await firstAborted(interrupts.signal, leader.signal);
    if (first === leader.signal) {
      warn(`leadership lost: ${(leader.signal.reason as Error).message}`);
      return EXIT.lost;
    }
    await leader.resign();
    return EXIT.ok;
  } finally {
    // Revoking the lease also withdraws a candidacy that never led.
    await session.close().catch(() => {});
  }
}

async function listen(client: Client, name: string, interrupts: Interrupts, json: boolean): Promise<number> {
  // observeLeader reports the state at start, then each change; it ends (without error) on the signal.
  for await (const event of observeLeader(client, name, { signal: interrupts.signal })) {
    if (json) printJson(eventJson(event));
    else print(eventLine(event));
  }
  return EXIT.ok;
}

function eventLine(e: LeaderEvent): string {
  if (e.type === 'none') return 'no leader';
  const l = e.leader;
  return `leader key=${l.key} term=${l.fencingToken} lease=${l.leaseId.toString(16)} value=${token(l.value)}`;
}

function eventJson(e: LeaderEvent): object {
  if (e.type === 'none') return { type: 'none', revision: e.revision };
  const l = e.leader;
  return { type: 'leader', key: l.key, term: l.fencingToken, lease: l.leaseId.toString(16), value: l.value, revision: e.revision };
}
