// `etcd-concurrency inspect <name>`: who holds a lock (or leads an election) and who waits, in order.
import { listParticipants, type Client } from '../index.js';
import { COMMON, COMMON_HELP, connect, nameArg, parse } from './options.js';
import { EXIT, print, printJson, table, token } from './output.js';
import { Interrupts } from './signals.js';

export const INSPECT_HELP = `Usage: etcd-concurrency inspect <name> [options]

Shows the owner of lock or election <name> (the participant with the oldest key) and the queue
behind it in order, each with its key, lease id (hex), the lease's remaining and granted TTL, its
fencing token (the key's CreateRevision) and its age in revisions.

etcd stores no timestamps, so how long a participant has waited is unknown. AGE is the number of
revisions (writes anywhere in the cluster) since its key was created: it orders participants and
grows with traffic, but it is not a duration. TTL is the time left before the lease would expire
without renewal (live holders renew every TTL/3), also unrelated to waiting time.

Options:
  --json                  print {"name","revision","owner","waiting":[...]} as one JSON line
  -w, --watch             print again on every change under <name>/ until interrupted

${COMMON_HELP}

Exit status: 0 ok (also after an interrupt with --watch); 2 bad usage; 1 any other error.

Examples:
  etcd-concurrency inspect jobs/nightly
  etcd-concurrency inspect jobs/nightly --json | jq -r .owner.key`;

export async function inspectCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    ...COMMON,
    json: { type: 'boolean' },
    watch: { type: 'boolean', short: 'w' },
  });
  if (values.help) {
    print(INSPECT_HELP);
    return EXIT.ok;
  }
  const name = nameArg(positionals[0], 'name');
  const json = values.json ?? false;
  const interrupts = new Interrupts();
  const client = connect(values);
  try {
    const show = async (): Promise<void> => {
      const snap = await snapshot(client, name, interrupts.signal);
      if (json) return printJson(snap);
      // A terminal gets a fresh screen per refresh; a pipe or file gets blocks separated by a blank line.
      if (values.watch && process.stdout.isTTY) process.stdout.write('\x1b[2J\x1b[H');
      for (const line of render(snap)) print(line);
      if (values.watch && !process.stdout.isTTY) print('');
    };
    if (!values.watch) {
      await show();
      return EXIT.ok;
    }
    // Watch first, read second: a change between the two is then both in the read and an event.
    const watch = client.watch(`${name}/`, { prefix: true, signal: interrupts.signal });
    try {
      await watch.created;
      await show();
      for await (const _batch of watch) await show();
    } catch (err) {
      if (!interrupts.signal.aborted) throw err;
    }
    return EXIT.ok;
  } finally {
    interrupts.dispose();
    await client.close();
  }
}

interface Participant {
  key: string;
  /** Lease id, lowercase hex as in the key. */
  lease: string;
  /** Seconds left on the lease; -1 if it is gone (the key is about to vanish). */
  ttl: number;
  grantedTtl: number;
  /** CreateRevision of the key: the fencing token (term of a leader). */
  token: bigint;
  /** Revisions since the key was created: its age measured in writes (etcd keeps no timestamps). */
  ageRevisions: bigint;
  value: string;
}

interface Snapshot {
  name: string;
  revision: bigint;
  owner: Participant | null;
  waiting: Participant[];
}

async function snapshot(client: Client, name: string, signal: AbortSignal): Promise<Snapshot> {
  const { participants, revision } = await listParticipants(client, name, { signal });
  const leases = await Promise.all(participants.map((kv) => client.leaseTimeToLive(kv.lease, { signal })));
  const all = participants.map(
    (kv, i): Participant => ({
      key: kv.key.toString(),
      lease: kv.lease.toString(16),
      ttl: leases[i]!.ttl,
      grantedTtl: leases[i]!.grantedTtl,
      token: kv.createRevision,
      ageRevisions: revision - kv.createRevision,
      value: kv.value.toString('utf8'),
    }),
  );
  return { name, revision, owner: all[0] ?? null, waiting: all.slice(1) };
}

function render(s: Snapshot): string[] {
  if (!s.owner) return [`${s.name}: free, nobody waiting (at revision ${s.revision})`];
  const head = `${s.name}: owned by ${s.owner.key}, ${s.waiting.length} waiting (at revision ${s.revision})`;
  const withValues = [s.owner, ...s.waiting].some((p) => p.value !== '');
  const row = (role: string, p: Participant): string[] => [
    role,
    p.key,
    p.lease,
    p.ttl < 0 ? 'expired' : `${p.ttl}s/${p.grantedTtl}s`,
    p.token.toString(),
    `${p.ageRevisions} rev${p.ageRevisions === 1n ? '' : 's'}`,
    ...(withValues ? [token(p.value)] : []),
  ];
  const rows = [
    ['ROLE', 'KEY', 'LEASE', 'TTL', 'TOKEN', 'AGE', ...(withValues ? ['VALUE'] : [])],
    row('owner', s.owner),
    ...s.waiting.map((p, i) => row(`#${i + 1}`, p)),
  ];
  return [head, ...table(rows)];
}
