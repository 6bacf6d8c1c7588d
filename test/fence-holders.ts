// Lock holders in child processes (test/fixtures/fence-holder.ts) for the fencing tests: started,
// read event by event, signalled, and all killed after the file's tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const FIXTURE = fileURLToPath(new URL('./fixtures/fence-holder.ts', import.meta.url));

export type HolderEvent = Record<string, string | boolean | undefined> & { event: string };

/** One fence-holder child. */
export class Holder {
  readonly child: ChildProcess;
  private readonly events: HolderEvent[] = [];
  private waiter?: () => void;
  private stderr = '';
  private ended = false;
  readonly exited: Promise<number | null>;

  constructor(args: string[]) {
    this.child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    live.add(this);
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      this.events.push(JSON.parse(line) as HolderEvent);
      this.waiter?.();
    });
    this.exited = once(this.child, 'close').then(([code]) => {
      this.ended = true;
      live.delete(this);
      this.waiter?.();
      return code as number | null;
    });
  }

  /** The next event printed (in order), checked to be `name`; rejects if the child ends first. */
  async next(name: string): Promise<HolderEvent> {
    for (;;) {
      const e = this.events.shift();
      if (e) {
        if (e.event !== name) throw new Error(`holder printed ${JSON.stringify(e)} where "${name}" was expected; stderr: ${this.stderr}`);
        return e;
      }
      if (this.ended) throw new Error(`holder exited before printing "${name}"; stderr: ${this.stderr}`);
      await new Promise<void>((r) => (this.waiter = r));
      this.waiter = undefined;
    }
  }

  /** Every event left, once the child has exited 0. */
  async rest(): Promise<HolderEvent[]> {
    const code = await this.exited;
    if (code !== 0) throw new Error(`holder exited with ${code}; stderr: ${this.stderr}`);
    return this.events.splice(0);
  }

  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }
}

const live = new Set<Holder>();

/** Kills every holder still running (SIGKILL ends a stopped one too) and waits for each to end. */
export async function killHolders(): Promise<void> {
  await Promise.all(
    [...live].map((h) => {
      h.child.kill('SIGKILL');
      return h.exited;
    }),
  );
}
