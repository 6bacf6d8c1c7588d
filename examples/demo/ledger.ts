// The protected resource of the story: card 8801's ledger, a store that knows nothing about etcd
// but checks fencing tokens (or records what PostgreSQL decided: see pg-ledger.ts). It accepts a write only if its token is at least the highest token it
// has accepted before, so a holder whose lock has since passed to someone else (a larger token) is
// turned away, however sure that holder is that it still holds the lock.
import type { Job } from './protocol.js';

export interface LedgerEntry {
  job: Job;
  token: bigint;
  by: string;
  atMs: number;
}

export interface Rejection {
  job: Job;
  token: bigint;
  by: string;
  highest: bigint;
  /** The job had already been applied: without the fence this write would have been a double charge. */
  wouldDoubleApply: boolean;
}

export type WriteResult = { ok: true; highest: bigint } | { ok: false; highest: bigint; reason: string };

export class FencedLedger {
  /** Highest token accepted so far (0: none yet). */
  private highestToken = 0n;
  readonly entries: LedgerEntry[] = [];
  readonly rejections: Rejection[] = [];

  get highest(): bigint {
    return this.highestToken;
  }

  /** Whether the job is already in the ledger. */
  has(jobId: string): boolean {
    return this.entries.some((e) => e.job.id === jobId);
  }

  write(job: Job, token: bigint, by: string, atMs: number): WriteResult {
    if (token < this.highestToken)
      return this.refused(job, token, by, this.highestToken, `token ${token} < highest seen ${this.highestToken}`);
    return this.accepted(job, token, by, atMs);
  }

  /** Records a write that the store behind it (PostgreSQL) accepted. */
  accepted(job: Job, token: bigint, by: string, atMs: number): WriteResult {
    if (token > this.highestToken) this.highestToken = token;
    this.entries.push({ job, token, by, atMs });
    return { ok: true, highest: this.highestToken };
  }

  /** Records a write refused because `highest` was stored. */
  refused(job: Job, token: bigint, by: string, highest: bigint, reason: string): WriteResult {
    if (highest > this.highestToken) this.highestToken = highest;
    this.rejections.push({ job, token, by, highest, wouldDoubleApply: this.has(job.id) });
    return { ok: false, highest, reason };
  }

  /** Jobs applied more than once: the damage a ghost does when nothing stops it. */
  doubleApplied(): number {
    const count = new Map<string, number>();
    for (const e of this.entries) count.set(e.job.id, (count.get(e.job.id) ?? 0) + 1);
    return [...count.values()].filter((n) => n > 1).length;
  }

  /** Whether the accepted writes carry strictly increasing tokens (one write per holder here). */
  tokensStrictlyIncreasing(): boolean {
    return this.entries.every((e, i) => i === 0 || e.token > this.entries[i - 1]!.token);
  }

  totalCents(): number {
    return this.entries.reduce((sum, e) => sum + e.job.cents, 0);
  }
}
