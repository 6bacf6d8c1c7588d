// SIGINT, SIGTERM and SIGHUP as an AbortSignal, so that waits stop cleanly and keys get removed.
import { CliError, signalExitCode } from './output.js';

const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/** The wait was cut short by a signal: exit 128 + its number, as a shell would report. */
export class Interrupted extends CliError {
  constructor(readonly signalName: NodeJS.Signals) {
    super(`interrupted by ${signalName}`, signalExitCode(signalName));
  }
}

/**
 * Owns the process's termination signals for one command. The first one aborts `signal` (with an
 * Interrupted reason) so the command can release what it holds; a second one while cleaning up
 * exits at once, since the cleanup may be stuck on an unreachable cluster (leases expire anyway).
 * While a child runs, `forwardTo` hands every signal to it instead.
 */
export class Interrupts {
  private readonly controller = new AbortController();
  readonly signal: AbortSignal = this.controller.signal;
  private forward?: (sig: NodeJS.Signals) => void;

  private readonly onSignal = (sig: NodeJS.Signals): void => {
    if (this.forward) return this.forward(sig);
    if (this.signal.aborted) process.exit(signalExitCode(sig));
    this.controller.abort(new Interrupted(sig));
  };

  constructor() {
    for (const s of SIGNALS) process.on(s, this.onSignal);
  }

  /** Sends every signal to `fn` (a child process) until called again with undefined. */
  forwardTo(fn: ((sig: NodeJS.Signals) => void) | undefined): void {
    this.forward = fn;
  }

  dispose(): void {
    for (const s of SIGNALS) process.off(s, this.onSignal);
  }
}

/** Resolves with the first of `signals` to abort. */
export function firstAborted(...signals: AbortSignal[]): Promise<AbortSignal> {
  const hit = signals.find((s) => s.aborted);
  if (hit) return Promise.resolve(hit);
  return new Promise((resolve) => {
    const done = (s: AbortSignal) => (): void => {
      for (const [sig, fn] of listeners) sig.removeEventListener('abort', fn);
      resolve(s);
    };
    const listeners = signals.map((s) => [s, done(s)] as const);
    for (const [sig, fn] of listeners) sig.addEventListener('abort', fn, { once: true });
  });
}
