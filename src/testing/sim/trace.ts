// What a run did, in order: every line goes into a hash (the run's fingerprint: one seed, one hash)
// and, when asked for, into a list that --trace prints.
import { createHash, type Hash } from 'node:crypto';

export class Trace {
  private readonly hash: Hash = createHash('sha256');
  /** Lines not hashed yet: hashing a few kilobytes at once costs less than a line at a time, and hashes the same. */
  private unhashed = '';
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
    this.unhashed += `${line}\n`;
    if (this.unhashed.length > 4096) this.flush();
    this.lines?.push(line);
  }

  digest(): string {
    this.flush();
    return this.hash.copy().digest('hex').slice(0, 32);
  }

  private flush(): void {
    this.hash.update(this.unhashed);
    this.unhashed = '';
  }
}
