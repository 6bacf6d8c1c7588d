// What a run did, in order: every line goes into a hash (the run's fingerprint: one seed, one hash)
// and, when asked for, into a list that --trace prints.
import { createHash, type Hash } from 'node:crypto';

export class Trace {
  private readonly hash: Hash = createHash('sha256');
  readonly lines: string[] | undefined;
  count = 0;

  constructor(
    keep: boolean,
    private readonly now: () => number,
  ) {
    this.lines = keep ? [] : undefined;
  }

  /** Records `what` at the current virtual time. */
  add(what: string): void {
    const line = `${this.now()} ${what}`;
    this.count++;
    this.hash.update(line);
    this.hash.update('\n');
    this.lines?.push(line);
  }

  digest(): string {
    return this.hash.copy().digest('hex').slice(0, 32);
  }
}
