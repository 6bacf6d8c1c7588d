// Read-only queries on a lock's or election's queue: who holds, who waits. Nothing here waits.
import type { Client } from '../client/client.js';
import { prefixEnd, SortOrder, SortTarget, type KeyValue, type RangeRequest } from '../client/kv.js';
import { CompactedError } from '../client/errors.js';
import { pagesByCreate } from '../client/pages.js';
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
  for (;;) {
    const first = await client.range(req, { signal: options.signal });
    // Every page read at one revision: the first page's, unless the caller named one.
    const revision = options.revision ?? first.header.revision;
    try {
      const pages = pagesByCreate(client, { ...req, revision }, { page: first, revision }, options.signal);
      for await (const page of pages) {
        const owner = page.kvs.find((kv) => isParticipant(prefix, kv));
        if (owner) return { owner, revision };
      }
      return { owner: undefined, revision };
    } catch (err) {
      // Compacted past between two pages of a read "now": read again from now.
      if (options.revision !== undefined || !(err instanceof CompactedError)) throw err;
    }
  }
}
