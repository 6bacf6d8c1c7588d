// `etcd-concurrency lock <name> [-- cmd args...]`: hold a lock while a command runs, or until interrupted.
import { spawn } from 'node:child_process';
import { Mutex, oldestParticipant, Session, type Client, type LockHandle } from '../index.js';
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

Options:
  --ttl <seconds>         lease TTL: how long the lock outlives a crashed holder (default 30)
  --timeout <dur>         give up waiting after this long (exit 4), e.g. 10s; default: wait forever
  --kill-grace <dur>      time between SIGTERM and SIGKILL when the lock is lost (default 10s)
  --json                  without a command: print {"key","rev","lease","ttl"} as one JSON line

${COMMON_HELP}

Exit status: the command's own status (128+n if a signal n killed it); without a command 0 after
an interrupt; 2 bad usage; 3 lock lost; 4 --timeout expired; 126/127 command not runnable/not
found; 130/143 interrupted (SIGINT/SIGTERM) while waiting; 1 any other error.

Examples:
  etcd-concurrency lock jobs/nightly -- ./backup.sh --full
  etcd-concurrency lock jobs/nightly --timeout 30s -- sh -c 'echo "token $ETCD_LOCK_REV"'`;

export async function lockCommand(args: string[]): Promise<number> {
  const [ours, afterDashes] = splitAtDashes(args);
  const { values, positionals } = parse(ours, {
    ...COMMON,
    ttl: { type: 'string' },
    timeout: { type: 'string' },
    'kill-grace': { type: 'string' },
    json: { type: 'boolean' },
  });
  if (values.help) {
    print(LOCK_HELP);
    return EXIT.ok;
  }
  const name = nameArg(positionals[0], 'lock name');
  // `lock name cmd args` works as in etcdctl; `--` is needed only when the command has options.
  const command = [...positionals.slice(1), ...(afterDashes ?? [])];
  if (afterDashes !== undefined && command.length === 0) throw new UsageError('nothing to run after --');
  const ttl = ttlArg(values.ttl, 30);
  const timeoutMs = values.timeout === undefined ? undefined : durationArg(values.timeout, '--timeout');
  const graceMs = durationArg(values['kill-grace'] ?? '10s', '--kill-grace', { allowZero: true });

  const interrupts = new Interrupts();
  const client = connect(values);
  try {
    const session = await Session.create(client, { ttl, signal: interrupts.signal });
    try {
      const wait = timeoutMs === undefined ? interrupts.signal : AbortSignal.any([interrupts.signal, AbortSignal.timeout(timeoutMs)]);
      let handle: LockHandle;
      try {
        handle = await new Mutex(session, name).lock({ signal: wait });
      } catch (err) {
        if (!interrupts.signal.aborted && wait.aborted) {
          // Mutex.lock has already removed our key; say who holds the lock, which is what one wants to know.
          throw new CliError(`timed out after ${values.timeout} waiting for lock ${name}${await heldBy(client, name)}`, EXIT.timeout);
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
async function holdLock(handle: LockHandle, interrupts: Interrupts, json: boolean): Promise<number> {
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
async function runLocked(handle: LockHandle, command: string[], graceMs: number, interrupts: Interrupts): Promise<number> {
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

/** " (held by <key>, token <rev>)", or "" when unknown. */
async function heldBy(client: Client, name: string): Promise<string> {
  try {
    const { owner } = await oldestParticipant(client, name);
    return owner ? ` (held by ${owner.key.toString()}, token ${owner.createRevision})` : '';
  } catch {
    return '';
  }
}
