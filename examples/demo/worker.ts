// One demo worker: a separate OS process with its own etcd client, so the parent can SIGKILL or
// SIGSTOP it like a crashed or frozen service. Commands arrive on stdin and events leave on stdout,
// one JSON object per line (protocol.ts). The ledger lives in the parent: reads and writes to it
// are requests on the same pipes.
//
// Run by main.ts as: node --import tsx examples/demo/worker.ts
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Mutex, Session, runAsLeader } from '../../src/index.js';
import { describe, encode, type Command, type LedgerReply, type LedgerRequest, type WorkerEvent } from './protocol.js';

let name = 'worker';
let client: Client | undefined;
let mainTtl = 10;
let mainSession: Promise<Session> | undefined;
/** Sessions we own, closed (revoked) on exit. */
const sessions = new Set<Session>();
let exiting = false;
let campaign: { stop: AbortController; done: Promise<void> } | undefined;

const replies = new Map<number, (reply: LedgerReply) => void>();
let nextRequest = 1;

function send(event: WorkerEvent): void {
  process.stdout.write(encode(event));
}

function ledger(req: LedgerRequest): Promise<LedgerReply> {
  const id = nextRequest++;
  return new Promise((resolve) => {
    replies.set(id, resolve);
    send({ ev: 'ledger', id, req });
  });
}

function fail(err: unknown): void {
  if (exiting) return;
  send({ ev: 'error', message: describe(err) });
}

async function openSession(ttl: number): Promise<Session> {
  const session = await Session.create(client!, { ttl });
  sessions.add(session);
  const lease = session.leaseId.toString(16);
  session.signal.addEventListener(
    'abort',
    () => {
      if (!exiting && sessions.has(session)) send({ ev: 'session-lost', lease, reason: describe(session.signal.reason) });
    },
    { once: true },
  );
  send({ ev: 'session', lease, ttl: session.ttl, endpoint: client!.activeEndpoint });
  return session;
}

async function closeSession(session: Session): Promise<void> {
  sessions.delete(session);
  await session.close().catch(() => {});
}

/**
 * The critical section, as a careful holder writes it: take the lock, read the ledger, do the slow
 * part, then check that the lock is still held right before writing, with the fencing token.
 * A ghost (`ghost: true`) stands for code that ignores what the library told it and writes anyway.
 */
async function lockAndWrite(c: Extract<Command, { cmd: 'lock' }>): Promise<void> {
  const own = c.ttl !== undefined;
  const session = own ? await openSession(c.ttl!) : await (mainSession ??= openSession(mainTtl));
  const asked = performance.now();
  const handle = await new Mutex(session, c.lock).lock();
  const token = handle.fencingToken.toString();
  const onLost = (): void => send({ ev: 'signal', reason: describe(handle.signal.reason) });
  handle.signal.addEventListener('abort', onLost, { once: true });
  send({ ev: 'locked', token, key: handle.key, waitedMs: Math.round(performance.now() - asked) });

  const seen = await ledger({ op: 'read', job: c.job });
  // The slow part: a call to the card network, say. Started before we tell the parent, which may
  // freeze us (SIGSTOP) the moment it hears about it.
  const started = performance.now();
  const slowPart = sleep(c.holdMs);
  send({ ev: 'working', ms: c.holdMs, alreadyApplied: seen.applied === true });
  await slowPart;
  const sleptMs = Math.round(performance.now() - started);

  // What the library says now. assertHeld() compares the lease deadline with the clock itself,
  // so it is right even when no timer has run yet since the process woke up.
  const signalAborted = handle.signal.aborted;
  const signalReason = signalAborted ? describe(handle.signal.reason) : undefined;
  let lost: string | undefined;
  try {
    handle.assertHeld();
  } catch (err) {
    lost = describe(err);
  }
  send({
    ev: 'woke',
    sleptMs,
    plannedMs: c.holdMs,
    signalAborted,
    ...(signalReason === undefined ? {} : { signalReason }),
    ...(lost === undefined ? {} : { lost }),
  });

  if (lost === undefined || c.ghost) {
    // A ghost writes what it decided before its pause; a careful holder writes only if still needed.
    if (c.ghost || !seen.applied) await ledger({ op: 'write', job: c.job, token });
  }
  send({ ev: 'releasing' });
  // Our own delete must not read as a loss. (The library can abort handle.signal with "its key was
  // deleted" when the watch sees the unlock's delete before the unlock's answer arrives.)
  handle.signal.removeEventListener('abort', onLost);
  await handle.unlock();
  if (own) await closeSession(session);
  send({ ev: 'unlocked' });
}

async function lead(c: Extract<Command, { cmd: 'campaign' }>): Promise<void> {
  const stop = new AbortController();
  const done = (async () => {
    await runAsLeader(
      client!,
      c.election,
      {
        value: name,
        ttl: c.ttl,
        signal: stop.signal,
        onLeaderChange: (leading, leader) => {
          const term = leader.fencingToken.toString();
          if (leading) send({ ev: 'leading', term, lease: leader.session.leaseId.toString(16), ttl: leader.session.ttl });
          else send({ ev: 'not-leading', term, why: stop.signal.aborted ? 'shutdown' : describe(leader.signal.reason) });
        },
      },
      async (leader) => {
        // The scheduler's work: one batch per tick, checking leadership before each step.
        const term = leader.fencingToken.toString();
        for (let n = 1; !leader.signal.aborted; n++) {
          leader.assertLeader();
          send({ ev: 'tick', term, n });
          await sleep(c.tickMs, undefined, { signal: leader.signal }).catch(() => {});
        }
      },
    );
    send({ ev: 'resigned' });
  })();
  campaign = { stop, done };
  await done;
}

async function exit(): Promise<void> {
  exiting = true;
  campaign?.stop.abort();
  await campaign?.done.catch(() => {});
  await Promise.all([...sessions].map((s) => s.close().catch(() => {})));
  await client?.close();
  send({ ev: 'bye' });
  process.stdin.destroy();
}

function handle(c: Command): void {
  switch (c.cmd) {
    case 'init':
      name = c.name;
      mainTtl = c.ttl;
      // Every worker gets all endpoints, starting at a different one, as a fleet of services would.
      client = new Client({ endpoints: c.endpoints, dialTimeoutMs: 1000 });
      return;
    case 'lock':
      void lockAndWrite(c).catch(fail);
      return;
    case 'campaign':
      void lead(c).catch(fail);
      return;
    case 'resign':
      campaign?.stop.abort();
      return;
    case 'ledger-reply':
      replies.get(c.id)?.(c.reply);
      replies.delete(c.id);
      return;
    case 'exit':
      void exit().catch(fail);
      return;
  }
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line.trim() === '') return;
  try {
    handle(JSON.parse(line) as Command);
  } catch (err) {
    fail(err);
  }
});
// The parent went away (or told us to exit): leave without waiting for anyone.
lines.on('close', () => {
  if (!exiting) {
    exiting = true;
    void client?.close();
  }
});

send({ ev: 'ready', pid: process.pid });
