// A leader's health check in the spirit of client-go's HealthzAdaptor: a process whose leadership
// lapsed while its leader-only work went on is unhealthy, so that an orchestrator restarts it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InvalidArgumentError } from '../client/errors.js';

/** The answer of a health check: healthy, or not and why. */
export type HealthStatus = { healthy: true } | { healthy: false; reason: string };

/** Anything that can say whether this process is healthy, as {@link healthHandler} serves it. */
export interface HealthCheck {
  /** Healthy now, or not and why. Synchronous and cheap: called on every probe. */
  check(): HealthStatus;
}

/** The term whose leadership ended: its key and fencing token (a LeaderHandle is one). */
export interface LeaderTerm {
  readonly key: string;
  readonly fencingToken: bigint;
}

/**
 * The health of a process that runs leader-only work with {@link runAsLeader}: pass it as
 * `options.health`. Healthy while leading, while not leading, and while a task whose leadership
 * ended is stopping within the grace period; unhealthy once that task has outlived its leadership
 * by more than `graceMs` (it ignores `leader.signal`, or is stuck), until it stops.
 * `leaderHealth({ graceMs })` makes one; an application may supply its own (runAsLeader only calls
 * `ended` and `stopped`).
 */
export interface LeaderHealth extends HealthCheck {
  /** `check().healthy`. */
  healthy(): boolean;
  /** How long a task may run on after its leadership ended before the process counts as unhealthy. */
  readonly graceMs: number;
  /** Told by runAsLeader: the task of `term` runs on although its leadership ended (with `reason`). */
  ended(term: LeaderTerm, reason: unknown): void;
  /** Told by runAsLeader: the task has settled, whatever lapsed is over. */
  stopped(): void;
}

export interface LeaderHealthOptions {
  /**
   * How long, in milliseconds, a task may keep running after its leadership ended (lost, or the
   * shutdown signal) before the check fails. Choose it above the time your task needs to stop
   * once `leader.signal` aborts. 0 fails the check as soon as leadership ends under a running task.
   */
  graceMs: number;
}

/**
 * A health check fed by {@link runAsLeader}: `runAsLeader(client, name, { value, health }, task)`,
 * then mount `healthHandler(health)` on your `/healthz`.
 */
export function leaderHealth(options: LeaderHealthOptions): LeaderHealth {
  const graceMs = options?.graceMs;
  if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0) {
    throw new InvalidArgumentError(`graceMs must be a number of milliseconds from 0 up, got ${String(graceMs)}`);
  }
  return new LeaderHealthState(graceMs);
}

/** What leaderHealth() makes; not exported from the package. */
class LeaderHealthState implements LeaderHealth {
  /** The term whose task still runs after its leadership ended: since when, and why. */
  private lapsed?: { at: number; key: string; term: bigint; why: string };

  constructor(readonly graceMs: number) {}

  ended(leader: LeaderTerm, reason: unknown): void {
    if (this.lapsed) return;
    const why = reason instanceof Error ? reason.message : String(reason);
    this.lapsed = { at: performance.now(), key: leader.key, term: leader.fencingToken, why };
  }

  stopped(): void {
    this.lapsed = undefined;
  }

  check(): HealthStatus {
    const l = this.lapsed;
    if (!l) return { healthy: true };
    const ms = performance.now() - l.at;
    if (ms < this.graceMs) return { healthy: true };
    return {
      healthy: false,
      reason:
        `leadership of ${l.key} (term ${l.term}) ended ${(ms / 1000).toFixed(1)}s ago and its task has not stopped ` +
        `within the ${this.graceMs / 1000}s grace period (${l.why})`,
    };
  }

  healthy(): boolean {
    return this.check().healthy;
  }
}

/**
 * A `node:http` request handler for a health endpoint such as `/healthz`: 200 `ok` while `check`
 * is healthy, else 503 with the reason, as text. Mount it on the path yourself
 * (`if (req.url === '/healthz') return handler(req, res)`), or serve it alone with
 * `http.createServer(healthHandler(health))`. HEAD gets the status without a body.
 */
export function healthHandler(check: HealthCheck | (() => HealthStatus)): (req: IncomingMessage, res: ServerResponse) => void {
  const run = typeof check === 'function' ? check : () => check.check();
  return (req, res) => {
    let status: HealthStatus;
    try {
      status = run();
    } catch (err) {
      status = { healthy: false, reason: `the health check failed: ${err instanceof Error ? err.message : String(err)}` };
    }
    const body = status.healthy ? 'ok\n' : `${status.reason}\n`;
    res.writeHead(status.healthy ? 200 : 503, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'cache-control': 'no-store',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
}
