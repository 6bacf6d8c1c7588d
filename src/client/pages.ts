// Reading a range in pages by CreateRevision, for a queue's look-ups: no key created in one revision
// with another is skipped between pages.
import type { Client } from './client.js';
import { type KeyValue, type RangeRequest, type RangeResult, SortOrder } from './kv.js';

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
