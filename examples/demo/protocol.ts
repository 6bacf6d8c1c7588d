// The JSON-lines protocol between the demo's parent process (main.ts) and its workers (worker.ts).
// One JSON object per line: commands go down the worker's stdin, events come up its stdout.
// Fencing tokens and lease ids are int64s, so they travel as decimal / hex strings.

/** A charge on card 8801: the work a lock holder does, recorded in the parent's fenced ledger. */
export interface Job {
  id: string;
  /** "charge #3" */
  label: string;
  cents: number;
}

export type Command =
  /** First line a worker reads: who it is and where etcd is. */
  | { cmd: 'init'; name: string; endpoints: string[]; ttl: number }
  /**
   * Take the lock, read the ledger, "work" for holdMs, then write the job with the fencing token.
   * `ttl` gives this lock a session of its own; `ghost` writes even after being told the lock is lost.
   */
  | { cmd: 'lock'; lock: string; job: Job; holdMs: number; ttl?: number; ghost?: boolean }
  /** runAsLeader on `election`, dispatching a batch every tickMs while leading. */
  | { cmd: 'campaign'; election: string; ttl: number; tickMs: number }
  /** Shut the campaign down gracefully: stop the task, resign, close the session. */
  | { cmd: 'resign' }
  /** Close sessions (revoking their leases) and the client, then exit 0. */
  | { cmd: 'exit' }
  | { cmd: 'ledger-reply'; id: number; reply: LedgerReply };

export type LedgerRequest = { op: 'read'; job: Job } | { op: 'write'; job: Job; token: string };

export interface LedgerReply {
  /** write: accepted. read: always true. */
  ok: boolean;
  /** read: whether the job is already in the ledger. */
  applied?: boolean;
  /** The highest fencing token the ledger has accepted so far. */
  highest: string;
  /** write: why it was rejected. */
  reason?: string;
}

export type WorkerEvent =
  | { ev: 'ready'; pid: number }
  | { ev: 'session'; lease: string; ttl: number; endpoint: string }
  | { ev: 'locked'; token: string; key: string; waitedMs: number }
  | { ev: 'working'; ms: number; alreadyApplied: boolean }
  /** handle.signal fired (the library telling the holder its lock is gone). */
  | { ev: 'signal'; reason: string }
  /** After the critical section's work: how long it really took, and what the library said. */
  | { ev: 'woke'; sleptMs: number; plannedMs: number; signalAborted: boolean; signalReason?: string; lost?: string }
  | { ev: 'releasing' }
  | { ev: 'unlocked' }
  | { ev: 'session-lost'; lease: string; reason: string }
  | { ev: 'leading'; term: string; lease: string; ttl: number }
  | { ev: 'tick'; term: string; n: number }
  | { ev: 'not-leading'; term: string; why: string }
  | { ev: 'resigned' }
  | { ev: 'ledger'; id: number; req: LedgerRequest }
  | { ev: 'error'; message: string }
  | { ev: 'bye' };

export function encode(message: Command | WorkerEvent): string {
  return `${JSON.stringify(message)}\n`;
}

/** An error's message on one line, with the class name (LockLostError: ...). */
export function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name === 'Error' ? err.constructor.name : err.name}: ${err.message}`.replace(/\s*\n\s*/g, ' ');
  return String(err);
}
