// Read-only queries on a lock's or election's queue: who holds, who waits. Nothing here waits.
import type { Client } from '../client/client.js';
import { prefixEnd, SortOrder, SortTarget, type KeyValue } from '../client/kv.js';
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
  const end = prefixEnd(prefix);
  let minCreate = 0n;
  for (;;) {
    const r = await client.range(
      {
        key: prefix,
        rangeEnd: end,
        sortOrder: SortOrder.ASCEND,
        sortTarget: SortTarget.CREATE,
        minCreateRevision: minCreate,
        revision: options.revision ?? 0n,
        limit: 8n,
      },
      { signal: options.signal },
    );
    const owner = r.kvs.find((kv) => isParticipant(prefix, kv));
    const last = r.kvs[r.kvs.length - 1];
    if (owner || !r.more || !last) return { owner, revision: options.revision ?? r.header.revision };
    minCreate = last.createRevision + 1n;
  }
}
