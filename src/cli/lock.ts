// `etcd-concurrency lock <name> [-- cmd args...]`: hold a lock while a command runs, or until interrupted.
import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
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
  type KeyValue,
  type LockHandle,
  type PermitHandle,
} from '../index.js';
import { COMMON, COMMON_HELP, connectTo, durationArg, durationText, nameArg, parse, splitAtDashes, ttlArg } from './options.js';
import { CliError, EXIT, print, printJson, signalExitCode, token, UsageError, warn } from './output.js';
import { firstAborted, Interrupts } from './signals.js';
import { METRICS_HELP, startMetrics } from './metrics.js';

export const LOCK_HELP = `Usage: etcd-concurrency lock <name> [options] [-- <command> [args...]]
       etcd-concurrency lock <name> [options] -c '<shell command line>'

Waits for the lock <name> (fair: first come, first served), then either runs <command> with the
lock held and releases it when the command exits, or, without a command, prints the key and its
fencing token and holds the lock until interrupted (Ctrl-C). Interoperates with \`etcdctl lock\`.

The command gets ETCD_LOCK_KEY (our key) and ETCD_LOCK_REV (the fencing token, decimal) in its
environment, inherits stdin/stdout/stderr, and runs in its own process group, which receives the
SIGINT/SIGTERM/SIGHUP sent to this process. If the lock is lost while it runs, the whole group gets
SIGTERM, then SIGKILL after --kill-grace, and we exit 3.

If this process is killed with SIGKILL (or crashes), the command keeps running in its own group
but is no longer locked: after --ttl the lease expires and the next waiter holds the lock while
the command may still run. Pass ETCD_LOCK_REV to the resource as a fencing token (a later holder's
is larger), or run both under a supervisor that kills the whole group (systemd, a container).

With --limit N it is a semaphore: at most N holders at once (as \`consul lock -n N\`), every
participant passing the same N. With --read or --write it is a readers-writer lock in the layout
of Go's recipe.RWMutex: readers share, a writer excludes everyone, first come first served.

Options:
  --try                   take the lock only if it is free now, else exit at once (flock -n);
                          leaves no key behind. --timeout 0 does the same
  --timeout <dur>         give up after this long (exit 4), connecting included, e.g. 10s;
                          default: wait forever
  --conflict-exit-code <n>  exit status when --try or --timeout did not get the lock, 0 to 255
                          (flock -E; default 4)
  --label <text>          written into our key's value, for inspect (default <hostname>:<pid>;
                          --label '' writes none)
  -c, --command <line>    run <line> through $SHELL -c (default /bin/sh), as flock -c
  --shell                 run the command words as one line through $SHELL -c (consul lock)
  --verbose               tell on stderr when we queue, whom we wait behind, when we acquire
                          (token, time waited) and when we release
  --limit <n>             a semaphore of n permits (1 to ${MAX_PERMITS}) instead of a lock
  --read                  take a shared read lock of the readers-writer lock <name>
  --write                 take the exclusive write lock of the readers-writer lock <name>
  --ttl <seconds>         lease TTL: how long the lock outlives a crashed holder, e.g. 30 or 30s
                          (whole seconds; default 30, min 2)
  --kill-grace <dur>      with a command: time between SIGTERM and SIGKILL to its process group
                          when the lock is lost (default 10s)
  --json                  without a command: print {"key","rev","lease","ttl"} as one JSON line
${METRICS_HELP}

${COMMON_HELP}

Exit status: the command's own status (128+n if a signal n killed it); without a command 0 after
an interrupt; 2 bad usage; 3 lock lost; 4 (or --conflict-exit-code) not acquired: --try found it
held, or --timeout expired; 126/127 command not runnable/not found; 130/143 interrupted
(SIGINT/SIGTERM) while waiting; 1 any other error.

Examples:
  etcd-concurrency lock jobs/nightly -- ./backup.sh --full
  etcd-concurrency lock jobs/nightly --try --conflict-exit-code 0 -- ./backup.sh   # skip if running
  etcd-concurrency lock jobs/nightly --timeout 30s -c 'echo "token $ETCD_LOCK_REV"'
  etcd-concurrency lock --limit 3 encoders -- ./encode.sh
  etcd-concurrency lock --read config -- ./render.sh`;

/** What lock can hold: a lock, a permit of a semaphore, or a read or write lock. */
type Kind = { limit: number } | { rw: 'read' | 'write' } | 'lock';

/** What the command holds, released the same way whatever the kind. */
type Held = Pick<LockHandle, 'key' | 'fencingToken' | 'session' | 'signal' | 'unlock'>;

function kindOf(values: { limit?: string; read?: boolean; write?: boolean }): Kind {
  const chosen = [values.limit !== undefined && '--limit', values.read && '--read', values.write && '--write'].filter(Boolean);
  if (chosen.length > 1)
    throw new UsageError(`${chosen.join(' and ')} exclude each other: choose a semaphore (--limit), a read lock or a write lock`);
  if (values.read) return { rw: 'read' };
  if (values.write) return { rw: 'write' };
  if (values.limit === undefined) return 'lock';
  const n = /^[0-9]+$/.test(values.limit) ? Number(values.limit) : NaN;
  if (!(n >= 1 && n <= MAX_PERMITS)) throw new UsageError(`--limit must be a whole number from 1 to ${MAX_PERMITS}, got "${values.limit}"`);
  return { limit: n };
}

/** Our key for `kind` on this session, and how to take it: waiting, or only if free now. */
interface Taker {
  key: string;
  take(signal: AbortSignal): Promise<Held>;
  tryTake(): Promise<Held | null>;
}

function taker(session: Session, name: string, kind: Kind, label: string): Taker {
  if (kind === 'lock') {
    const m = new Mutex(session, name);
    return { key: m.key, take: (signal) => m.lock({ signal, label }), tryTake: () => m.tryLock({ label }) };
  }
  if ('rw' in kind) {
    const rw = new RWMutex(session, name);
    return kind.rw === 'read'
      ? { key: rw.readKey, take: (signal) => rw.rLock({ signal, label }), tryTake: () => rw.tryRLock({ label }) }
      : { key: rw.writeKey, take: (signal) => rw.lock({ signal, label }), tryTake: () => rw.tryLock({ label }) };
  }
  const sem = new Semaphore(session, name, { permits: kind.limit });
  const held = (permit: PermitHandle): Held => ({
    key: permit.key,
    fencingToken: permit.fencingToken,
    session: permit.session,
    get signal() {
      return permit.signal;
    },
    unlock: () => permit.release(),
  });
  return {
    key: sem.key,
    take: async (signal) => held(await sem.acquire({ signal, label })),
    tryTake: async () => {
      const permit = await sem.tryAcquire({ label });
      return permit ? held(permit) : null;
    },
  };
}

/** --conflict-exit-code: a status from 0 to 255. */
function exitCodeArg(raw: string): number {
  const n = /^[0-9]{1,3}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 0 && n <= 255)) throw new UsageError(`--conflict-exit-code must be a whole number from 0 to 255, got "${raw}"`);
  return n;
}

/** The command to run: its words, or `-c`/`--shell` as `$SHELL -c '<line>'`. */
function commandOf(values: { command?: string; shell?: boolean }, words: string[]): string[] {
  const shell = process.env.SHELL || '/bin/sh';
  if (values.command !== undefined) {
    if (words.length > 0)
      throw new UsageError(`give the command either with -c or after the lock name, not both (got -c and "${words[0]}")`);
    if (values.command.trim() === '') throw new UsageError('-c needs a command line to run');
    return [shell, '-c', values.command];
  }
  if (values.shell) {
    if (words.length === 0) throw new UsageError('--shell needs a command to run');
    return [shell, '-c', words.join(' ')];
  }
  return words;
}

export async function lockCommand(args: string[]): Promise<number> {
  const [ours, afterDashes] = splitAtDashes(args);
  const { values, positionals } = parse(
    ours,
    {
      ...COMMON,
      ttl: { type: 'string' },
      timeout: { type: 'string' },
      try: { type: 'boolean' },
      'conflict-exit-code': { type: 'string' },
      label: { type: 'string' },
      command: { type: 'string', short: 'c' },
      shell: { type: 'boolean' },
      verbose: { type: 'boolean' },
      'kill-grace': { type: 'string' },
      json: { type: 'boolean' },
      limit: { type: 'string' },
      read: { type: 'boolean' },
      write: { type: 'boolean' },
      metrics: { type: 'string' },
    },
    { runsCommand: true },
  );
  if (values.help) {
    print(LOCK_HELP);
    return EXIT.ok;
  }
  const name = nameArg(positionals[0], 'lock name');
  const kind = kindOf(values);
  // `lock name cmd args` works as in etcdctl; `--` is needed only when the command has options.
  const words = [...positionals.slice(1), ...(afterDashes ?? [])];
  if (afterDashes !== undefined && afterDashes.length === 0) throw new UsageError('nothing to run after --');
  const command = commandOf(values, words);
  // Options that would be silently ignored are refused: the user meant something by them.
  if (command.length > 0 && values.json) {
    throw new UsageError(
      '--json only applies without a command (it prints the key and token); the command gets them as ETCD_LOCK_KEY and ETCD_LOCK_REV',
    );
  }
  if (command.length === 0 && values['kill-grace'] !== undefined) throw new UsageError('--kill-grace only applies with a command to run');
  const ttl = ttlArg(values.ttl, 30);
  const timeoutMs = values.timeout === undefined ? undefined : durationArg(values.timeout, '--timeout', { allowZero: true });
  // --timeout 0 means "do not wait", as flock -w 0 and etcdctl-style scripts expect.
  const tryOnce = (values.try ?? false) || timeoutMs === 0;
  if (values['conflict-exit-code'] !== undefined && !tryOnce && timeoutMs === undefined) {
    throw new UsageError('--conflict-exit-code only applies with --try or --timeout (without them the lock is waited for)');
  }
  const conflictCode = values['conflict-exit-code'] === undefined ? EXIT.timeout : exitCodeArg(values['conflict-exit-code']);
  const graceMs = durationArg(values['kill-grace'] ?? '10s', '--kill-grace', { allowZero: true });
  const label = values.label ?? `${hostname()}:${process.pid}`;
  const verbose = values.verbose ?? false;

  const metrics = values.metrics === undefined ? undefined : await startMetrics(values.metrics);
  // One name per process: a bounded attribute, so the series carry it.
  const client = await connectTo(values, metrics ? { meterProvider: metrics.meterProvider, nameAttribute: true } : {}).catch(
    async (err: unknown) => {
      await metrics?.close();
      throw err;
    },
  );
  const interrupts = new Interrupts();
  // --timeout bounds everything up to holding the lock: connecting, granting the lease, waiting.
  const wait =
    timeoutMs === undefined || timeoutMs === 0 ? interrupts.signal : AbortSignal.any([interrupts.signal, AbortSignal.timeout(timeoutMs)]);
  const timedOut = (): boolean => !interrupts.signal.aborted && wait.aborted;
  try {
    let session: Session;
    try {
      session = await Session.create(client, { ttl, signal: wait });
    } catch (err) {
      if (timedOut()) {
        throw new CliError(
          `timed out after ${durationText(values.timeout!)} connecting to etcd at ${client.endpoints.join(', ')} (granting the session's lease); ` +
            'check that etcd runs there and answers, or pass the right --endpoints',
          EXIT.timeout,
          { cause: err },
        );
      }
      throw err;
    }
    try {
      if (session.ttl > ttl) warn(`etcd raised the lease TTL from ${ttl}s to ${session.ttl}s (its minimum for this cluster)`);
      if (verbose) warn(`connected to ${client.activeEndpoint}; session lease ${session.leaseId.toString(16)}, TTL ${session.ttl}s`);
      const t = taker(session, name, kind, label);
      const queueWatch = new AbortController();
      const queued = verbose ? await reportQueued(client, name, kind, t.key, queueWatch.signal) : undefined;
      const started = performance.now();
      let handle: Held | null;
      try {
        handle = tryOnce ? await t.tryTake() : await t.take(wait);
      } catch (err) {
        queueWatch.abort();
        if (timedOut()) {
          // The acquire has already removed our key; say who holds the lock, which is what one wants to know.
          throw new CliError(
            `timed out after ${durationText(values.timeout!)} waiting for ${what(kind)} ${name}${await heldBy(client, name, kind)}`,
            conflictCode,
          );
        }
        throw err;
      }
      // The "queued" line comes before "acquired" or "not acquired": our put always reaches the watch.
      await queued?.();
      queueWatch.abort();
      if (handle === null) {
        throw new CliError(`${what(kind)} ${name} is taken${await heldBy(client, name, kind)}; not waiting (--try)`, conflictCode);
      }
      if (verbose)
        warn(`acquired ${handle.key} with token ${handle.fencingToken} after ${((performance.now() - started) / 1000).toFixed(3)}s`);
      if (interrupts.signal.aborted) {
        // Interrupted just as the lock came: honour the interrupt rather than start the command.
        await handle.unlock();
        throw interrupts.signal.reason;
      }
      if (command.length > 0) return await runLocked(handle, command, graceMs, interrupts, verbose);
      return await holdLock(handle, interrupts, values.json ?? false, verbose);
    } finally {
      // Revoking the lease removes our key even if something above failed half-way.
      await session.close().catch(() => {});
    }
  } finally {
    interrupts.dispose();
    await client.close();
    await metrics?.close();
  }
}

/**
 * --verbose: watches our own key (the watch is in place before we enqueue), and once it is created
 * reads, at that revision, who was ahead of us: prints `queued as <key> ... behind <key>`. Returns
 * a function that resolves once that line is printed (or given up, if the acquire failed first).
 */
async function reportQueued(client: Client, name: string, kind: Kind, key: string, signal: AbortSignal): Promise<() => Promise<void>> {
  const watch = client.watch(key, { signal });
  await watch.created;
  const done = (async () => {
    for await (const batch of watch) {
      const put = batch.events.find((e) => e.type === 'put' && e.kv.createRevision === e.kv.modRevision);
      if (!put) continue;
      const rev = put.kv.createRevision;
      const ahead = await blockersAt(client, name, kind, rev, signal);
      const who = (kv: KeyValue): string => `${token(kv.key.toString())}${kv.value.length > 0 ? ` (${token(kv.value.toString())})` : ''}`;
      // A semaphore's first `limit` participants hold; otherwise the oldest blocker holds.
      const permits = typeof kind === 'object' && 'limit' in kind ? kind.limit : 1;
      const queuedAs = `queued as ${key} with token ${rev}`;
      if (ahead.length === 0) warn(`${queuedAs}: nobody ahead`);
      else if (ahead.length < permits) warn(`${queuedAs}: a permit is free (${ahead.length} of ${permits} held)`);
      else if (ahead.length === 1) warn(`${queuedAs} behind ${who(ahead[0]!)}, the holder`);
      else
        warn(
          `${queuedAs} behind ${who(ahead[ahead.length - 1]!)}; ${ahead.length} ahead, held by ${ahead.slice(0, permits).map(who).join(', ')}`,
        );
      return;
    }
  })().catch(() => {});
  return () => done;
}

/** The participants older than revision `rev` that can keep us waiting, oldest first, as etcd held them at `rev`. */
async function blockersAt(client: Client, name: string, kind: Kind, rev: bigint, signal: AbortSignal): Promise<KeyValue[]> {
  if (kind === 'lock' || 'limit' in kind) {
    const { participants } = await listParticipants(client, name, { revision: rev, signal });
    return participants.filter((kv) => kv.createRevision < rev);
  }
  // A reader waits for older writers only; a writer for every older reader and writer.
  return rwParticipants(client, name, kind.rw === 'read' ? /^write\/[0-9a-f]+$/ : RW_KEY, signal, rev);
}

/** A readers-writer lock's participant key after `<name>/`: its side, then its id. */
const RW_KEY = /^(read|write)\/[0-9a-f]+$/;

/**
 * The participants of readers-writer lock `name` whose key after `<name>/` matches `modes`, oldest
 * first; with `before`, those older than that revision, as etcd held them then. Keys without a
 * lease (stray data) and keys of other shapes are no participants: nobody waits for them.
 */
async function rwParticipants(client: Client, name: string, modes: RegExp, signal: AbortSignal, before?: bigint): Promise<KeyValue[]> {
  const prefix = Buffer.from(`${name}/`);
  const r = await client.range(
    {
      key: prefix,
      rangeEnd: prefixEnd(prefix),
      sortOrder: SortOrder.ASCEND,
      sortTarget: SortTarget.CREATE,
      ...(before === undefined ? {} : { revision: before, maxCreateRevision: before - 1n }),
    },
    { signal },
  );
  return r.kvs.filter((kv) => kv.lease !== 0n && modes.test(kv.key.toString().slice(prefix.length)));
}

/** Without a command: print the key and token, then hold until interrupted or lost. */
async function holdLock(handle: Held, interrupts: Interrupts, json: boolean, verbose: boolean): Promise<number> {
  const lease = handle.session.leaseId.toString(16);
  if (json) printJson({ key: handle.key, rev: handle.fencingToken, lease, ttl: handle.session.ttl });
  else print(`key=${token(handle.key)} rev=${handle.fencingToken}`);
  const first = await firstAborted(interrupts.signal, handle.signal);
  if (first === handle.signal) {
    warn(`lock lost: ${(handle.signal.reason as Error).message}`);
    return EXIT.lost;
  }
  await handle.unlock();
  if (verbose) warn(`released ${handle.key}`);
  return EXIT.ok;
}

/** Signals process group `pgid`; false if it no longer exists. */
function signalGroup(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs the command in its own process group while holding the lock. Signals to us go to the whole
 * group; if the lock is lost, the group gets SIGTERM, then SIGKILL after the grace period, so that
 * a script's own children stop too.
 */
async function runLocked(handle: Held, command: string[], graceMs: number, interrupts: Interrupts, verbose: boolean): Promise<number> {
  // Lost already (the first look at the signal checks the session): never start the command.
  if (handle.signal.aborted) {
    warn(`lock lost before the command started: ${(handle.signal.reason as Error).message}`);
    return EXIT.lost;
  }
  const [file, ...argv] = command as [string, ...string[]];
  const child = spawn(file, argv, {
    stdio: 'inherit',
    // Its own process group (and session): the group can be signalled as one.
    detached: true,
    env: { ...process.env, ETCD_LOCK_KEY: handle.key, ETCD_LOCK_REV: handle.fencingToken.toString() },
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: NodeJS.ErrnoException }>((resolve) => {
    child.once('error', (error: NodeJS.ErrnoException) => resolve({ code: null, signal: null, error }));
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  const pgid = child.pid;
  // The command decides how to react to Ctrl-C and friends; we release the lock once it has exited.
  interrupts.forwardTo((sig) => {
    if (pgid !== undefined) signalGroup(pgid, sig);
  });
  let lost = false;
  let killed: Promise<void> | undefined;
  let cancelKill = (): void => {};
  const onLost = (): void => {
    lost = true;
    warn(
      `lock lost while the command ran: ${(handle.signal.reason as Error).message}; ` +
        `sent SIGTERM to the command's process group${graceMs > 0 ? `, SIGKILL follows in ${graceMs / 1000}s` : ' and SIGKILL'}`,
    );
    if (pgid === undefined) return;
    signalGroup(pgid, 'SIGTERM');
    killed = new Promise((resolve) => {
      const timer = setTimeout(() => {
        signalGroup(pgid, 'SIGKILL');
        resolve();
      }, graceMs);
      cancelKill = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  };
  handle.signal.addEventListener('abort', onLost, { once: true });
  const result = await exited;
  handle.signal.removeEventListener('abort', onLost);
  if (lost && pgid !== undefined) {
    // The command has exited; members of its group that outlive it get the rest of the grace period.
    await Promise.race([killed, groupGone(pgid)]);
    cancelKill();
  }
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
  // unlock() never rejects for want of etcd: a delete that failed goes on in the background, and
  // closing the session (below) gives it the client's call timeout before the lease is revoked.
  const released = await handle.unlock();
  if (released.state === 'pending') {
    // The command's outcome matters more than this: its exit code is still passed on.
    const why = released.error instanceof Error ? released.error.message : String(released.error);
    warn(
      `could not release ${handle.key} yet (${why}); retrying until it is gone, else it is freed when lease ${handle.session.leaseId.toString(16)} ends`,
    );
  } else if (verbose) warn(`released ${handle.key}`);
  return result.code ?? signalExitCode(result.signal!);
}

/**
 * Resolves once process group `pgid` has no member left. No event announces that for processes
 * that are not our children, so this polls (the kill timer bounds the wait).
 */
async function groupGone(pgid: number): Promise<void> {
  while (signalGroup(pgid, 0)) await new Promise((resolve) => setTimeout(resolve, 50));
}

function what(kind: Kind): string {
  if (kind === 'lock') return 'lock';
  return 'rw' in kind ? `the ${kind.rw} lock of` : 'a permit of semaphore';
}

/** " (held by <key> <label>, token <rev>)", or "" when unknown. */
async function heldBy(client: Client, name: string, kind: Kind): Promise<string> {
  // Only worth a short wait: the timeout has already expired.
  const signal = AbortSignal.timeout(1000);
  const who = (kv: KeyValue): string => `${token(kv.key.toString())}${kv.value.length > 0 ? ` ${token(kv.value.toString())}` : ''}`;
  try {
    if (kind === 'lock') {
      const { owner } = await oldestParticipant(client, name, { signal });
      return owner ? ` (held by ${who(owner)}, token ${owner.createRevision})` : '';
    }
    if ('limit' in kind) {
      const holders = (await listParticipants(client, name, { signal })).participants.slice(0, kind.limit);
      return holders.length ? ` (held by ${holders.map(who).join(', ')})` : '';
    }
    // A readers-writer lock: its oldest participant blocks whoever waits.
    const [first] = await rwParticipants(client, name, RW_KEY, signal);
    return first ? ` (oldest holder ${who(first)}, token ${first.createRevision})` : '';
  } catch {
    return '';
  }
}
