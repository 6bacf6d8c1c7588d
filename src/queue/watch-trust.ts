import type { Client } from '../client/client.js';

/** The first release of each line whose watch loses no event around a compaction (etcd 17529, 18089, 19179). */
const FIXED_IN: Readonly<Record<number, number>> = { 4: 36, 5: 18 };
/** How long an answer stands before the client asks again (a failover or an upgrade may change it). */
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
 * Whether the member this client talks to (the one serving its watches) delivers every watch event:
 * if not, a holding's watch may miss its key's delete, and the client's re-check reads the key too
 * (Ownership's safety net in ownership.ts). Asked by a Status on the client's own connection when first needed, and again
 * a minute after each answer; no answer yet, a failure or a refusal (Status may need the root role)
 * counts as no.
 */
export class WatchTrust {
  /** The endpoint whose member answered with a version that loses no event; undefined: none did. */
  private trusted: string | undefined;
  private asking = false;
  /** The endpoint of the last answer (or failure), and when. */
  private answeredFor: string | undefined;
  private answeredAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly client: Client) {}

  /**
   * True when the member at the client's current endpoint answered with a version that loses no
   * watch event (after a failover, not until that member answers). Asks again when it is time to.
   */
  lossless(): boolean {
    const at = this.client.activeEndpoint;
    if (!this.asking && (this.answeredFor !== at || performance.now() - this.answeredAt >= ASK_AGAIN_MS)) void this.ask();
    return this.trusted === at;
  }

  private async ask(): Promise<void> {
    this.asking = true;
    // The member asked: the answer is about it, even if the client fails over meanwhile.
    const at = this.client.activeEndpoint;
    try {
      const { version } = await this.client.status({ endpoint: at });
      this.trusted = mayLoseWatchEvents(version) ? undefined : at;
    } catch {
      this.trusted = undefined; // unreachable, refused or closed: not known, so not trusted
    } finally {
      this.answeredFor = at;
      this.answeredAt = performance.now();
      this.asking = false;
    }
  }
}
