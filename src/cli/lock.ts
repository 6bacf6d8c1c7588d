// `etcd-concurrency lock <name> [-- cmd args...]`: hold a lock while a command runs, or until interrupted.
import { spawn } from 'node:child_process';
import {
  listParticipants,
  MAX_PERMITS,
  Mutex,
  oldestParticipant,
  prefixEnd,
  RWMutex,
  Semaphore,
  Session,
  SortOrder,
  SortTarget,
  type Client,
  type LockHandle,
} from '../index.js';
import { COMMON, COMMON_HELP, connect, durationArg, nameArg, parse, splitAtDashes, ttlArg } from './options.js';
import { CliError, EXIT, print, printJson, signalExitCode, UsageError, warn } from './output.js';
import { firstAborted, Interrupts } from './signals.js';

export const LOCK_HELP = `Usage: etcd-concurrency lock <name> [options] [-- <command> [args...]]

Waits for the lock <name> (fair: first come, first served), then either runs <command> with the
lock held and releases it when the command exits, or, without a command, prints the key and its
fencing token and holds the lock until interrupted (Ctrl-C). Interoperates with \`etcdctl lock\`.

The command gets ETCD_LOCK_KEY (our key) and ETCD_LOCK_REV (the fencing token, decimal) in its
environment, inherits stdin/stdout/stderr, and receives SIGINT/SIGTERM/SIGHUP sent to this process.
If the lock is lost while it runs, it gets SIGTERM, then SIGKILL after --kill-grace, and we exit 3.

With --limit N it is a semaphore: at most N holders at once (as \`consul lock -n N\`), every
participant passing the same N. With --read or --write it is a readers-writer lock in the layout
of Go's recipe.RWMutex: readers share, a writer excludes everyone, first come first served.

Options:
  --limit <n>             a semaphore of n permits (1 to ${MAX_PERMITS}) instead of a lock
  --read                  take a shared read lock of the readers-writer lock <name>
  --write                 take the exclusive write lock of the readers-writer lock <name>
  --ttl <seconds>         lease TTL: how long the lock outlives a crashed holder (default 30, min 2)
  --timeout <dur>         give up after this long (exit 4), connecting included, e.g. 10s;
                          default: wait forever
  --kill-grace <dur>      with a command: time between SIGTERM and SIGKILL when the lock is lost
                          (default 10s)
  --json                  without a command: print {"key","rev","lease","ttl"} as one JSON line

${COMMON_HELP}

Exit status: the command's own status (128+n if a signal n killed it); without a command 0 after
an interrupt; 2 bad usage; 3 lock lost; 4 --timeout expired; 126/127 command not runnable/not
found; 130/143 interrupted (SIGINT/SIGTERM) while waiting; 1 any other error.

Examples:
  etcd-concurrency lock jobs/nightly -- ./backup.sh --full
  etcd-concurrency lock jobs/nightly --timeout 30s -- sh -c 'echo "token $ETCD_LOCK_REV"'
  etcd-concurrency lock --limit 3 encoders -- ./encode.sh
  etcd-concurrency lock --read config -- ./render.sh`;

/** What lock can hold: a lock, a permit of a semaphore, or a read or write lock. */
type Kind = { limit: number } | { rw: 'read' | 'write' } | 'lock';

/** What the command holds, released the same way whatever the kind. */
type Held = Pick<LockHandle, 'key' | 'fencingToken' | 'session' | 'signal' | 'unlock'>;

function kindOf(values: { limit?: string; read?: boolean; write?: boolean }): Kind {
  const chosen = [values.limit !== undefined && '--limit', values.read && '--read', values.write && '--write'].filter(Boolean);
  if (chosen.length > 1) throw new UsageError(`${chosen.join(' and ')} exclude each other: choose a semaphore (--limit), a read lock or a write lock`);
  if (values.read) return { rw: 'read' };
  if (values.write) return { rw: 'write' };
  if (values.limit === undefined) return 'lock';
  const n = /^[0-9]+$/.test(values.limit) ? Number(values.limit) : NaN;
  if (!(n >= 1 && n <= MAX_PERMITS)) throw new UsageError(`--limit must be a whole number from 1 to ${MAX_PERMITS}, got "${values.limit}"`);
  return { limit: n };
}

async function take(session: Session, name: string, kind: Kind, signal: AbortSignal): Promise<Held> {
  if (kind === 'lock') return new Mutex(session, name).lock({ signal });
  if ('rw' in kind) {
    const rw = new RWMutex(session, name);
    return kind.rw === 'read' ? rw.rLock({ signal }) : rw.lock({ signal });
  }
  const permit = await new Semaphore(session, name, { permits: kind.limit }).acquire({ signal });
  return {
    key: permit.key,
    fencingToken: permit.fencingToken,
    session: permit.session,
    get signal() {
      return permit.signal;
    },
    unlock: () => permit.release(),
  };
}

export async function lockCommand(args: string[]): Promise<number> {
  const [ours, afterDashes] = splitAtDashes(args);
  const { values, positionals } = parse(ours, {
    ...COMMON,
    ttl: { type: 'string' },
    timeout: { type: 'string' },
    'kill-grace': { type: 'string' },
    json: { type: 'boolean' },
    limit: { type: 'string' },
    read: { type: 'boolean' },
    write: { type: 'boolean' },
  });
  if (values.help) {
    print(LOCK_HELP);
    return EXIT.ok;
  }
  const name = nameArg(positionals[0], 'lock name');
  const kind = kindOf(values);
  // `lock name cmd args` works as in etcdctl; `--` is needed only when the command has options.
  const command = [...positionals.slice(1), ...(afterDashes ?? [])];
  if (afterDashes !== undefined && command.length === 0) throw new UsageError('nothing to run after --');
  // Options that would be silently ignored are refused: the user meant something by them.
  if (command.length > 0 && values.json) {
    throw new UsageError('--json only applies without a command (it prints the key and token); the command gets them as ETCD_LOCK_KEY and ETCD_LOCK_REV');
  }
  if (command.length === 0 && values['kill-grace'] !== undefined) throw new UsageError('--kill-grace only applies with a command to run');
  const ttl = ttlArg(values.ttl, 30);
  const timeoutMs = values.timeout === undefined ? undefined : durationArg(values.timeout, '--timeout');
  const graceMs = durationArg(values['kill-grace'] ?? '10s', '--kill-grace', { allowZero: true });

  const interrupts = new Interrupts();
  const client = connect(values);
  // --timeout bounds everything up to holding the lock: connecting, granting the lease, waiting.
  const wait = timeoutMs === undefined ? interrupts.signal : AbortSignal.any([interrupts.signal, AbortSignal.timeout(timeoutMs)]);
  const timedOut = (): boolean => !interrupts.signal.aborted && wait.aborted;
  try {
    let session: Session;
    try {
      session = await Session.create(client, { ttl, signal: wait });
    } catch (err) {
      if (timedOut()) {
        throw new CliError(
          `timed out after ${values.timeout} connecting to etcd at ${client.endpoints.join(', ')} (granting the session's lease); ` +
            'check that etcd runs there and answers, or pass the right --endpoints',
          EXIT.timeout,
          { cause: err },
        );
      }
      throw err;
    }
    try {
      if (session.ttl > ttl) warn(`etcd raised the lease TTL from ${ttl}s to ${session.ttl}s (its minimum for this cluster)`);
      let handle: Held;
      try {
        handle = await take(session, name, kind, wait);
      } catch (err) {
        if (timedOut()) {
          // The acquire has already removed our key; say who holds the lock, which is what one wants to know.
          throw new CliError(`timed out after ${values.timeout} waiting for ${what(kind)} ${name}${await heldBy(client, name, kind)}`, EXIT.timeout);
        }
        throw err;
      }
      if (interrupts.signal.aborted) {
        // Interrupted just as the lock came: honour the interrupt rather than start the command.
        await handle.unlock();
        throw interrupts.signal.reason;
      }
      if (command.length > 0) return await runLocked(handle, command, graceMs, interrupts);
      return await holdLock(handle, interrupts, values.json ?? false);
    } finally {
      // Revoking the lease removes our key even if something above failed half-way.
      await session.close().catch(() => {});
    }
  } finally {
    interrupts.dispose();
    await client.close();
  }
}

/** Without a command: print the key and token, then hold until interrupted or lost. */
async function holdLock(handle: Held, interrupts: Interrupts, json: boolean): Promise<number> {
  const lease = handle.session.leaseId.toString(16);
  if (json) printJson({ key: handle.key, rev: handle.fencingToken, lease, ttl: handle.session.ttl });
  else print(`key=${handle.key} rev=${handle.fencingToken}`);
  const first = await firstAborted(interrupts.signal, handle.signal);
  if (first === handle.signal) {
    warn(`lock lost: ${(handle.signal.reason as Error).message}`);
    return EXIT.lost;
  }
  await handle.unlock();
  return EXIT.ok;
}

/** Runs the command while holding the lock; stops it if the lock is lost. */
async function runLocked(handle: Held, command: string[], graceMs: number, interrupts: Interrupts): Promise<number> {
  const [file, ...argv] = command as [string, ...string[]];
  const child = spawn(file, argv, {
    stdio: 'inherit',
    env: { ...process.env, ETCD_LOCK_KEY: handle.key, ETCD_LOCK_REV: handle.fencingToken.toString() },
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: NodeJS.ErrnoException }>((resolve) => {
    child.once('error', (error: NodeJS.ErrnoException) => resolve({ code: null, signal: null, error }));
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  // The command decides how to react to Ctrl-C and friends; we release the lock once it has exited.
  interrupts.forwardTo((sig) => child.kill(sig));
  let lost = false;
  let killTimer: NodeJS.Timeout | undefined;
  const onLost = (): void => {
    lost = true;
    warn(
      `lock lost while the command ran: ${(handle.signal.reason as Error).message}; ` +
        `sent SIGTERM to the command${graceMs > 0 ? `, SIGKILL follows in ${graceMs / 1000}s` : ' and SIGKILL'}`,
    );
    child.kill('SIGTERM');
    killTimer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  };
  handle.signal.addEventListener('abort', onLost, { once: true });
  const result = await exited;
  clearTimeout(killTimer);
  handle.signal.removeEventListener('abort', onLost);
  interrupts.forwardTo(undefined);

  if (result.error) {
    await handle.unlock().catch(() => {});
    const notFound = result.error.code === 'ENOENT';
    throw new CliError(
      `cannot run ${file}: ${notFound ? 'command not found' : result.error.message}`,
      notFound ? EXIT.notFound : EXIT.cannotExecute,
    );
  }
  if (lost) return EXIT.lost;
  await handle.unlock().catch((err: Error) => {
    // The command's outcome matters more than this: its exit code is still passed on.
    warn(`could not release ${handle.key} (${err.message}); it is freed when lease ${handle.session.leaseId.toString(16)} expires`);
  });
  return result.code ?? signalExitCode(result.signal!);
}

function what(kind: Kind): string {
  if (kind === 'lock') return 'lock';
  return 'rw' in kind ? `the ${kind.rw} lock of` : 'a permit of semaphore';
}

/** " (held by <key>, token <rev>)", or "" when unknown. */
async function heldBy(client: Client, name: string, kind: Kind): Promise<string> {
  // Only worth a short wait: the timeout has already expired.
  const signal = AbortSignal.timeout(1000);
  try {
    if (kind === 'lock') {
      const { owner } = await oldestParticipant(client, name, { signal });
      return owner ? ` (held by ${owner.key.toString()}, token ${owner.createRevision})` : '';
    }
    if ('limit' in kind) {
      const holders = (await listParticipants(client, name, { signal })).participants.slice(0, kind.limit);
      return holders.length ? ` (held by ${holders.map((kv) => kv.key.toString()).join(', ')})` : '';
    }
    // A readers-writer lock: the oldest key under the name blocks whoever waits.
    const prefix = Buffer.from(`${name}/`);
    const r = await client.range({ key: prefix, rangeEnd: prefixEnd(prefix), sortOrder: SortOrder.ASCEND, sortTarget: SortTarget.CREATE, limit: 1n, keysOnly: true }, { signal });
    const first = r.kvs[0];
    return first ? ` (oldest holder ${first.key.toString()}, token ${first.createRevision})` : '';
  } catch {
    return '';
  }
}
