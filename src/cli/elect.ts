// `etcd-concurrency elect <name> <proposal>` campaigns; `elect --listen <name>` reports every leader change.
import { Election, observeLeader, Session, type Client, type LeaderEvent } from '../index.js';
import { COMMON, COMMON_HELP, connectTo, nameArg, parse, ttlArg } from './options.js';
import { EXIT, print, printJson, token, UsageError, warn } from './output.js';
import { firstAborted, Interrupts } from './signals.js';
import { untilAnswers, watchReachability } from './reachability.js';
import { METRICS_HELP, startMetrics } from './metrics.js';

export const ELECT_HELP = `Usage: etcd-concurrency elect <name> <proposal> [options]
       etcd-concurrency elect --listen <name> [options]

Campaigns in election <name> with the value <proposal>; once leading, prints the leader key and
its term (the fencing token) and leads until interrupted (Ctrl-C), then resigns so the next
candidate takes over at once. Interoperates with \`etcdctl elect\`.

With --listen, prints the current leader and then every change, one line each:
  leader key=<key> term=<token> lease=<hex> value=<value>
  no leader
(values with spaces or quotes are JSON-quoted). It keeps listening through an outage, saying on
stderr when etcd stops answering and when it answers again (then it reads the leader afresh, also
when a fresh cluster took the old one's place).

A campaign ends with exit 3 when leadership is lost (an outage longer than --ttl loses it), as
etcdctl elect does: run it under a supervisor that starts it again, or use runAsLeader in a program,
which campaigns again by itself.

Options:
  --ttl <seconds>         lease TTL: how long leadership outlives a crashed leader, e.g. 30 or 30s
                          (whole seconds; default 30, min 2)
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
  if (values.listen && positionals.length > expected)
    throw new UsageError(
      `--listen observes the election and takes no proposal (got "${positionals[expected]}"); drop --listen to campaign with it`,
    );
  if (positionals.length > expected) throw new UsageError(`unexpected argument "${positionals[expected]}"`);
  if (values.listen && values.ttl !== undefined) throw new UsageError('--ttl only applies when campaigning, not with --listen');
  const ttl = ttlArg(values.ttl, 30);

  const metrics = values.metrics === undefined ? undefined : await startMetrics(values.metrics);
  // One election per process: a bounded attribute, so the series carry its name.
  const client = await connectTo(values, metrics ? { meterProvider: metrics.meterProvider, nameAttribute: true } : {}).catch(
    async (err: unknown) => {
      await metrics?.close();
      throw err;
    },
  );
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

async function campaign(
  client: Client,
  name: string,
  proposal: string,
  ttl: number,
  interrupts: Interrupts,
  json: boolean,
): Promise<number> {
  const session = await Session.create(client, { ttl, signal: interrupts.signal });
  try {
    if (session.ttl > ttl) warn(`etcd raised the lease TTL from ${ttl}s to ${session.ttl}s (its minimum for this cluster)`);
    const leader = await new Election(session, name).campaign(proposal, { signal: interrupts.signal });
    const lease = session.leaseId.toString(16);
    if (json) printJson({ key: leader.key, term: leader.fencingToken, lease, value: leader.value });
    else print(`leader key=${token(leader.key)} term=${leader.fencingToken} lease=${lease} value=${token(leader.value)}`);
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

/**
 * --listen: prints the leader and every change. Through an outage it says on stderr that etcd does
 * not answer and that it still listens; once etcd answers again (or a fresh cluster answers in its
 * place) it reads the leader afresh, and prints it unless it is the one last printed.
 */
async function listen(client: Client, name: string, interrupts: Interrupts, json: boolean): Promise<number> {
  let last: string | undefined;
  let first = true;
  while (!interrupts.signal.aborted) {
    const round = new AbortController();
    const signal = AbortSignal.any([interrupts.signal, round.signal]);
    let down = false;
    const monitor = watchReachability(client, `${name}/`, signal, {
      down(err) {
        down = true;
        warn(`etcd does not answer (${err instanceof Error ? err.message : String(err)}); still listening for the leader of ${name}`);
      },
      changed(why) {
        warn(
          why === 'back'
            ? 'etcd answers again; reading the leader afresh'
            : 'another etcd cluster answers at these endpoints (new data); reading the leader afresh',
        );
        round.abort();
      },
    });
    try {
      // observeLeader reports the state at start, then each change; it ends (without error) on the signal.
      for await (const event of observeLeader(client, name, { signal })) {
        first = false;
        const id = event.type === 'none' ? 'none' : `${event.leader.key}|${event.leader.fencingToken}|${event.leader.value}`;
        if (id === last) continue;
        last = id;
        if (json) printJson(eventJson(event));
        else print(eventLine(event));
      }
    } catch (err) {
      // Until the first answer, a failure is reported (a wrong endpoint is not waited out).
      if (first || interrupts.signal.aborted) throw err;
      if (!down)
        warn(`etcd does not answer (${err instanceof Error ? err.message : String(err)}); still listening for the leader of ${name}`);
      await untilAnswers(client, `${name}/`, interrupts.signal);
    } finally {
      round.abort();
      await monitor;
    }
  }
  return EXIT.ok;
}

function eventLine(e: LeaderEvent): string {
  if (e.type === 'none') return 'no leader';
  const l = e.leader;
  return `leader key=${token(l.key)} term=${l.fencingToken} lease=${l.leaseId.toString(16)} value=${token(l.value)}`;
}

function eventJson(e: LeaderEvent): object {
  if (e.type === 'none') return { type: 'none', revision: e.revision };
  const l = e.leader;
  return { type: 'leader', key: l.key, term: l.fencingToken, lease: l.leaseId.toString(16), value: l.value, revision: e.revision };
}
