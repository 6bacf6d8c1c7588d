// Read-only queries on a lock's or election's queue: who holds, who waits. Nothing here waits.
import type { Client } from '../client/client.js';
import { prefixEnd, SortOrder, SortTarget, type KeyValue, type RangeRequest, type RangeResult } from '../client/kv.js';
import { isParticipant, prefixOf } from '../keys.js';

/** Every participant of a lock or election, oldest first: the holder, then the queue in order. */
export async function listParticipants(
  client: Client,
  name: string,
  options: { revision?: bigint; signal?: AbortSignal } = {},
): Promise<{ participants: KeyValue[]; revision: bigint }> {
  const prefix = Buffer.from(prefixOf(name));
  const r = await client.range(
    {
      key: prefix,
      rangeEnd: prefixEnd(prefix),
      sortOrder: SortOrder.ASCEND,
      sortTarget: SortTarget.CREATE,
      revision: options.revision ?? 0n,
    },
    { signal: options.signal },
  );
  return { participants: r.kvs.filter((kv) => isParticipant(prefix, kv)), revision: r.header.revision };
}

/** The oldest participant (the lock holder or leader) at `revision` (default: now), if any. */
export async function oldestParticipant(
  client: Client,
  name: string,
  options: { revision?: bigint; signal?: AbortSignal } = {},
): Promise<{ owner: KeyValue | undefined; revision: bigint }> {
  const prefix = Buffer.from(prefixOf(name));
  const req: RangeRequest = {
    key: prefix,
    rangeEnd: prefixEnd(prefix),
    sortOrder: SortOrder.ASCEND,
    sortTarget: SortTarget.CREATE,
    revision: options.revision ?? 0n,
    limit: 8n,
  };
  let revision = options.revision;
  for await (const page of pagesByCreate(client, req, undefined, options.signal)) {
    revision ??= page.revision;
    const owner = page.kvs.find((kv) => isParticipant(prefix, kv));
    if (owner) return { owner, revision };
  }
  return { owner: undefined, revision: revision! };
}

/**
 * The pages of a range sorted by CreateRevision (`req`: its sort order, its limit, and a min or max
 * CreateRevision to start from; `first`, when given, is its first page already read, at `revision`),
 * each page with the revision it was read at. Keys created in one revision (one Txn can create
 * several under a prefix) are not skipped: the next page starts at the last key's revision again,
 * with a larger limit, and the keys already given are left out.
 */
export async function* pagesByCreate(
  client: Client,
  req: RangeRequest,
  first: { page: RangeResult; revision: bigint } | undefined,
  signal?: AbortSignal,
): AsyncGenerator<{ kvs: KeyValue[]; revision: bigint }> {
  const desc = req.sortOrder === SortOrder.DESCEND;
  let page = first?.page;
  let revision = first?.revision ?? 0n;
  /** The keys given at revision `at`, the newest revision reached. */
  let at: bigint | undefined;
  const given = new Set<string>();
  let next = req;
  for (;;) {
    if (!page) {
      page = await client.range(next, { signal });
      revision = page.header.revision;
    }
    const kvs: KeyValue[] = [];
    for (const kv of page.kvs) {
      const id = kv.key.toString('latin1');
      if (kv.createRevision === at && given.has(id)) continue;
      if (kv.createRevision !== at) {
        at = kv.createRevision;
        given.clear();
      }
      given.add(id);
      kvs.push(kv);
    }
    yield { kvs, revision };
    if (!page.more || at === undefined) return;
    const limit = (req.limit ?? 0n) + BigInt(given.size);
    next = desc ? { ...req, maxCreateRevision: at, limit } : { ...req, minCreateRevision: at, limit };
    page = undefined;
  }
}
