// A holder's span at a protected resource: its accepted requests, from the first to the last.

/** A holder's window at a resource: the first and last of its accepted requests (sequence numbers). */
export interface Span<E> {
  token: bigint;
  worker: string;
  first: number;
  last: number;
  /** Its first accepted request. */
  entry: E;
}

/** Per token, its window of accepted requests (those `counts` picks), by start. */
export function spans<E extends { seq: number; token: bigint; worker: string; ok: boolean }>(
  log: E[],
  counts: (e: E) => boolean,
): Span<E>[] {
  const by = new Map<bigint, Span<E>>();
  for (const e of log) {
    if (!e.ok || !counts(e)) continue;
    const s = by.get(e.token);
    if (s) s.last = e.seq;
    else by.set(e.token, { token: e.token, worker: e.worker, first: e.seq, last: e.seq, entry: e });
  }
  return [...by.values()].sort((x, y) => x.first - y.first);
}
