import type { Client } from '../client/client.js';

/** The first release of each line whose watch loses no event around a compaction (etcd 17529, 18089, 19179). */
const FIXED_IN: Readonly<Record<number, number>> = { 4: 36, 5: 18 };
/** How long before a client that could not tell asks its members again. */
const ASK_AGAIN_MS = 60_000;

/** Whether etcd `version` (a Status answer, e.g. `3.4.23`) may drop a watch event: 3.4 before 3.4.36, 3.5 before 3.5.18. */
export function mayLoseWatchEvents(version: string): boolean {
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!m) return true;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (major !== 3) return major < 3;
  if (minor >= 6) return false;
  const fixed = FIXED_IN[minor];
  return fixed === undefined || patch < fixed;
}

/**
 * Whether every member this client may talk to delivers every watch event: what lets a waiter take
 * its turn on an event alone, with no request to confirm that its key still stands (older.ts).
 * Asked once by Status to each endpoint, when first needed; until every member has answered with a
 * version that loses no event (not asked yet, one unreachable or refusing Status), the answer is no,
 * and the client asks again a minute later.
 */
export class WatchTrust {
  private complete = false;
  private asking = false;
  private askedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly client: Client) {}

  /** True once every member was found to lose no watch event; asks them if it is time to. */
  lossless(): boolean {
    if (!this.complete && !this.asking && performance.now() - this.askedAt >= ASK_AGAIN_MS) void this.ask();
    return this.complete;
  }

  private async ask(): Promise<void> {
    this.asking = true;
    this.askedAt = performance.now();
    try {
      const versions = await Promise.all(this.client.endpoints.map(async (endpoint) => (await this.client.status({ endpoint })).version));
      this.complete = !versions.some(mayLoseWatchEvents);
    } catch {
      // Unreachable, refused (Status may need the root role) or closed: not known, so not trusted.
    } finally {
      this.asking = false;
    }
  }
}
