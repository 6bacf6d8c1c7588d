// What `inspect` shows of a name or a key prefix: the names found there from their keys' layout (as
// the web inspector finds them, web/model.ts), and for each who holds, who waits in order, and which
// keys are stray: in a participant's place, but on no lease.
import { prefixEnd, SortOrder, SortTarget, type Client, type KeyValue } from '../index.js';
import { table, token } from './output.js';
import { classifyKey } from './web/model.js';

export interface Participant {
  key: string;
  /** For a readers-writer lock: which side. */
  mode?: 'read' | 'write';
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
  /** Who the participant says it is: the value, or for a semaphore what follows the permit count. */
  label: string;
}

/**
 * A key in a participant's place with no lease: written without one (an operator's `etcdctl put`
 * over a participant's key keeps its CreateRevision and drops its lease). It holds nothing, nobody
 * waits for it, and it stays until someone deletes it.
 */
export interface Stray {
  key: string;
  token: bigint;
  ageRevisions: bigint;
  value: string;
}

export interface Snapshot {
  name: string;
  /**
   * A lock or election; a semaphore (every participant's value is the same permit count); a
   * readers-writer lock; a double barrier (`<name>/waiters/<id>`: every member is in).
   */
  kind: 'lock' | 'semaphore' | 'rwlock' | 'barrier';
  permits?: number;
  revision: bigint;
  /** The oldest holder (lock owner, leader): kept for scripts written before `holders`. */
  owner: Participant | null;
  holders: Participant[];
  waiting: Participant[];
  stray: Stray[];
}

/** `inspect <name>`: the name, and the names nested under `<name>/`. */
export interface NameView extends Snapshot {
  nested: Snapshot[];
}

/** `inspect <prefix>/`: every name under the prefix. */
export interface PrefixView {
  prefix: string;
  revision: bigint;
  names: Snapshot[];
}

type Layout = 'plain' | 'read' | 'write' | 'member';

/** At most this many lease TimeToLive calls in flight. */
const LEASE_CALLS = 16;

const HEX = /^[0-9a-f]+$/;

/** The layout of `key` as a participant key of `name` itself (`<name>/<hex>`, `…/read|write/<id>`, `…/waiters/<id>`). */
function ownLayout(name: string, key: string): Layout | undefined {
  const rest = key.slice(name.length + 1);
  if (HEX.test(rest)) return 'plain';
  const m = /^(read|write)\/[0-9a-f]+$/.exec(rest);
  if (m) return m[1] as 'read' | 'write';
  return /^waiters\/[0-9A-Za-z]+$/.test(rest) ? 'member' : undefined;
}

/**
 * The keys under `prefix`, oldest first, grouped by the name whose participants they are; keys of
 * no participant's layout are data, not shown. With `own`, a key in the layout of `own` itself is
 * its (so that a lock named `jobs/read` keeps its keys), before any nested name is looked for.
 */
async function readNames(
  client: Client,
  prefix: string,
  own: string | undefined,
  signal: AbortSignal,
): Promise<{ revision: bigint; names: Map<string, { kv: KeyValue; layout: Layout }[]> }> {
  const key = Buffer.from(prefix);
  const r = await client.range({ key, rangeEnd: prefixEnd(key), sortOrder: SortOrder.ASCEND, sortTarget: SortTarget.CREATE }, { signal });
  const names = new Map<string, { kv: KeyValue; layout: Layout }[]>();
  if (own !== undefined) names.set(own, []);
  for (const kv of r.kvs) {
    const k = kv.key.toString('utf8');
    const layout = own === undefined ? undefined : ownLayout(own, k);
    const found = layout ? { name: own!, layout } : classifyKey(prefix, k);
    if (!found) continue;
    let list = names.get(found.name);
    if (!list) names.set(found.name, (list = []));
    list.push({ kv, layout: found.layout });
  }
  return { revision: r.header.revision, names };
}

/** `fn` over `items`, at most `limit` at a time, results in order. */
async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** The first space-separated token of a value: a semaphore's permit count. */
function countOf(value: string): string {
  return value.split(' ', 1)[0]!;
}

/** One name's snapshot from its keys (oldest first): kind, holders, waiters, stray keys. */
async function snapshotOf(
  client: Client,
  name: string,
  keys: { kv: KeyValue; layout: Layout }[],
  revision: bigint,
  signal: AbortSignal,
): Promise<Snapshot> {
  const stray = keys
    .filter(({ kv }) => kv.lease === 0n)
    .map(
      ({ kv }): Stray => ({
        key: kv.key.toString(),
        token: kv.createRevision,
        ageRevisions: revision - kv.createRevision,
        value: kv.value.toString('utf8'),
      }),
    );
  const leased = keys.filter(({ kv }) => kv.lease !== 0n);
  // As the web inspector decides: the plain layout first, then a readers-writer lock, then a barrier.
  const plain = leased.filter((k) => k.layout === 'plain');
  const rw = leased.filter((k) => k.layout === 'read' || k.layout === 'write');
  const queue = plain.length > 0 ? plain : rw.length > 0 ? rw : leased.filter((k) => k.layout === 'member');
  // One TimeToLive per lease: a lease that vanished meanwhile shows as expired, not as an error.
  const leases = await mapLimited(queue, LEASE_CALLS, ({ kv }) =>
    client.leaseTimeToLive(kv.lease, { signal }).catch(() => ({ ttl: -1, grantedTtl: 0 })),
  );
  const all = queue.map(
    ({ kv, layout }, i): Participant => ({
      key: kv.key.toString(),
      ...(layout === 'read' || layout === 'write' ? { mode: layout } : {}),
      lease: kv.lease.toString(16),
      ttl: leases[i]!.ttl,
      grantedTtl: leases[i]!.grantedTtl,
      token: kv.createRevision,
      ageRevisions: revision - kv.createRevision,
      value: kv.value.toString('utf8'),
      label: kv.value.toString('utf8'),
    }),
  );
  let held = all.length > 0 ? 1 : 0;
  let kind: Snapshot['kind'] = 'lock';
  let permits: number | undefined;
  if (queue.length > 0 && queue[0]!.layout === 'member') {
    kind = 'barrier';
    held = all.length;
  } else if (all.length > 0 && all[0]!.mode !== undefined) {
    kind = 'rwlock';
    // The oldest writer holds alone; otherwise every reader older than the first writer holds.
    const firstWriter = all.findIndex((p) => p.mode === 'write');
    held = firstWriter === 0 ? 1 : firstWriter < 0 ? all.length : firstWriter;
  } else if (all.length > 0 && all.every((p) => /^[1-9][0-9]*(?: |$)/.test(p.value) && countOf(p.value) === countOf(all[0]!.value))) {
    // A semaphore's value is its permit count, then the holder's label if it has one.
    kind = 'semaphore';
    permits = Number(countOf(all[0]!.value));
    held = Math.min(permits, all.length);
    for (const p of all) p.label = p.value.slice(countOf(p.value).length + 1);
  }
  return {
    name,
    kind,
    ...(permits ? { permits } : {}),
    revision,
    owner: all[0] ?? null,
    holders: all.slice(0, held),
    waiting: all.slice(held),
    stray,
  };
}

/**
 * The snapshots of `names`, in name order. A name whose only keys are stray is left out (a data key
 * such as `users/42` looks like one), unless it is `own`, the name asked for.
 */
async function snapshots(
  client: Client,
  read: Awaited<ReturnType<typeof readNames>>,
  own: string | undefined,
  signal: AbortSignal,
): Promise<Snapshot[]> {
  const names = [...read.names].filter(([name, keys]) => name === own || keys.some(({ kv }) => kv.lease !== 0n));
  names.sort(([a], [b]) => (a === own ? -1 : b === own ? 1 : a < b ? -1 : a > b ? 1 : 0));
  return Promise.all(names.map(([name, keys]) => snapshotOf(client, name, keys, read.revision, signal)));
}

/** `inspect <name>`: its holders, waiters and stray keys, and the names nested under `<name>/`. */
export async function nameView(client: Client, name: string, signal: AbortSignal): Promise<NameView> {
  const [own, ...nested] = await snapshots(client, await readNames(client, `${name}/`, name, signal), name, signal);
  return { ...own!, nested };
}

/** `inspect <prefix>/`: every name under the prefix. */
export async function prefixView(client: Client, prefix: string, signal: AbortSignal): Promise<PrefixView> {
  const read = await readNames(client, prefix, undefined, signal);
  return { prefix, revision: read.revision, names: await snapshots(client, read, undefined, signal) };
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/** A name's heading: who holds, how many wait, stray keys; with `revision`, when this was read. */
function heading(s: Snapshot, revision: boolean): string {
  const stray = s.stray.length > 0 ? `, ${plural(s.stray.length, 'stray key')}` : '';
  const at = revision ? ` (at revision ${s.revision})` : '';
  if (!s.owner) return `${token(s.name)}: free, nobody waiting${stray}${at}`;
  if (s.kind === 'barrier') return `${token(s.name)}: double barrier, ${plural(s.holders.length, 'member')} in${stray}${at}`;
  const what =
    s.kind === 'semaphore'
      ? `semaphore, ${s.holders.length} of ${s.permits} permits held`
      : s.kind === 'rwlock'
        ? s.holders[0]!.mode === 'write'
          ? `write-locked by ${token(s.owner.key)}`
          : `read-locked by ${plural(s.holders.length, 'reader')}`
        : `owned by ${token(s.owner.key)}`;
  return `${token(s.name)}: ${what}, ${s.waiting.length} waiting${stray}${at}`;
}

/** A name's heading and table: holders, waiters in order, then stray keys. */
function block(s: Snapshot, revision: boolean): string[] {
  const people = [...s.holders, ...s.waiting];
  if (people.length === 0 && s.stray.length === 0) return [heading(s, revision)];
  // Labels (a semaphore's values without the permit count, which is in the heading).
  const withValues = people.some((p) => p.label !== '') || s.stray.some((k) => k.value !== '');
  const holderRole = (p: Participant): string =>
    s.kind === 'semaphore'
      ? 'permit'
      : s.kind === 'barrier'
        ? 'member'
        : p.mode === 'write'
          ? 'writer'
          : p.mode === 'read'
            ? 'reader'
            : 'owner';
  const row = (role: string, p: Participant): string[] => [
    role,
    token(p.key),
    p.lease,
    p.ttl < 0 ? 'expired' : `${p.ttl}s/${p.grantedTtl}s`,
    p.token.toString(),
    `${p.ageRevisions} rev${p.ageRevisions === 1n ? '' : 's'}`,
    ...(withValues ? [token(p.label)] : []),
  ];
  const strayRow = (k: Stray): string[] => [
    'stray',
    token(k.key),
    '-',
    '-',
    k.token.toString(),
    `${k.ageRevisions} rev${k.ageRevisions === 1n ? '' : 's'}`,
    ...(withValues ? [token(k.value)] : []),
  ];
  const rows = [
    ['ROLE', 'KEY', 'LEASE', 'TTL', 'TOKEN', 'AGE', ...(withValues ? ['VALUE'] : [])],
    ...s.holders.map((p) => row(holderRole(p), p)),
    ...s.waiting.map((p, i) => row(`#${i + 1}${p.mode ? ` ${p.mode}` : ''}`, p)),
    ...s.stray.map(strayRow),
  ];
  return [heading(s, revision), ...table(rows)];
}

/** What a stray row means, once after the tables that show one. */
function strayNote(all: Snapshot[]): string[] {
  if (!all.some((s) => s.stray.length > 0)) return [];
  return [
    "stray: a key without a lease in a participant's place (written without one, e.g. by etcdctl put over a holder's key): " +
      'it holds nothing and nobody waits for it; it stays until removed with etcdctl del <key>',
  ];
}

/** `inspect <name>` as text: the name first (with the revision read), then each nested name. */
export function renderName(v: NameView): string[] {
  return [...block(v, true), ...v.nested.flatMap((s) => block(s, false)), ...strayNote([v, ...v.nested])];
}

/** `inspect <prefix>/` as text: how many names, then each. */
export function renderPrefix(v: PrefixView): string[] {
  const head =
    v.names.length === 0
      ? `${token(v.prefix)}: no lock, semaphore, readers-writer lock, election or barrier here (at revision ${v.revision})`
      : `${token(v.prefix)}: ${plural(v.names.length, 'name')} (at revision ${v.revision})`;
  return [head, ...v.names.flatMap((s) => block(s, false)), ...strayNote(v.names)];
}
