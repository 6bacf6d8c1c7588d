// The calls doctor makes under its scratch prefix: round trips (put, linearizable read, watch
// notification, watch catch-up) and a lease's life (grant, attach, renew, revoke). They record what
// happened; the checks (checks.ts) judge it.
import { randomBytes } from 'node:crypto';
import {
  AuthenticationError,
  EtcdError,
  PermissionDeniedError,
  WriteOutcomeUnknownError,
  type Client,
  type ResponseHeader,
} from '../../index.js';
import { SCRATCH_LEASE_TTL } from './checks.js';
import { oneLine } from './members.js';
import { stats } from './numbers.js';
import type { Failure, LeaseFindings, LeaseStep, RoundTripFindings } from './report.js';

/** The scratch prefix, and whether anything may have been written under it (then cleanup matters). */
export interface Scratch {
  prefix: string;
  wrote: boolean;
}

/** A put under the scratch prefix that remembers whether it may have written. */
async function scratchPut(
  client: Client,
  scratch: Scratch,
  key: string,
  value: string,
  options: { signal: AbortSignal; lease?: bigint },
): Promise<ResponseHeader> {
  try {
    const h = await client.put(key, value, options);
    scratch.wrote = true;
    return h;
  } catch (err) {
    if (err instanceof WriteOutcomeUnknownError) scratch.wrote = true;
    throw err;
  }
}

/**
 * A failed step as the report records it, its message starting with `what` (the library's own
 * errors start with the call's name already, unless `always`); an interruption or an
 * authentication failure ends doctor instead.
 */
function failure(err: unknown, signal: AbortSignal, what: string, always = false): Failure {
  if (signal.aborted) throw signal.reason;
  if (err instanceof AuthenticationError) throw err;
  const message = !always && err instanceof EtcdError ? oneLine(err) : `${what}: ${oneLine(err)}`;
  return { message, denied: err instanceof PermissionDeniedError };
}

export async function roundTrips(client: Client, scratch: Scratch, signal: AbortSignal, samples: number): Promise<RoundTripFindings> {
  const key = `${scratch.prefix}round-trip`;
  const call = { signal };
  const found: RoundTripFindings = { stats: { put: null, read: null, watch: null }, failed: null, catchUp: null };
  // Watches have no deadline of their own: each step waits at most the client's call deadline.
  const withTimeout = <T>(p: Promise<T>, what: string): Promise<T> => timeout(p, what, client.callTimeoutMs);
  const failed = (what: string, err: unknown): RoundTripFindings => {
    if (signal.aborted) throw signal.reason;
    if (err instanceof AuthenticationError) throw err;
    found.failed = { what, failure: { message: oneLine(err), denied: err instanceof PermissionDeniedError } };
    return found;
  };
  // One put first, not measured: it proves we may write there, and warms the connection.
  try {
    await scratchPut(client, scratch, key, 'doctor', call);
  } catch (err) {
    return failed(`writing ${key}`, err);
  }
  const put: number[] = [];
  const read: number[] = [];
  try {
    for (let i = 0; i < samples; i++) put.push(await timed(() => scratchPut(client, scratch, key, `put ${i}`, call)));
  } catch (err) {
    return failed('a put', err);
  }
  try {
    for (let i = 0; i < samples; i++) read.push(await timed(() => client.get(key, call)));
  } catch (err) {
    return failed(`a linearizable read of ${key}`, err);
  }
  found.stats.put = stats(put);
  found.stats.read = stats(read);

  // A watch notification: from sending a put to the event arriving on a watch created before it.
  const notify: number[] = [];
  try {
    const ac = new AbortController();
    const w = client.watch(key, { signal: AbortSignal.any([signal, ac.signal]) });
    try {
      await withTimeout(w.created, `creating a watch on ${key}`);
      const events = w[Symbol.asyncIterator]();
      for (let i = 0; i < samples; i++) {
        const t0 = performance.now();
        const putting = scratchPut(client, scratch, key, `watch ${i}`, call);
        const next = await withTimeout(events.next(), `a watch notification on ${key}`);
        notify.push(performance.now() - t0);
        await putting;
        if (next.done) throw new Error('the watch ended');
      }
    } finally {
      ac.abort();
    }
  } catch (err) {
    return failed('a watch notification', err);
  }
  found.stats.watch = stats(notify);

  // Catch-up: a watch that starts at a revision etcd already has (here: our last put's) is
  // "unsynced" and gets its events from a loop that runs every 100 ms, not at once. Measured from
  // the watch's "created" answer (sent at once either way) to its first event.
  const catchUp: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      const rev = (await scratchPut(client, scratch, key, `catch-up ${i}`, call)).revision;
      const ac = new AbortController();
      const w = client.watch(key, { startRevision: rev, signal: AbortSignal.any([signal, ac.signal]) });
      try {
        await withTimeout(w.created, `creating a watch on ${key}`);
        const t0 = performance.now();
        const next = await withTimeout(w[Symbol.asyncIterator]().next(), `the catch-up of a watch on ${key}`);
        if (next.done) throw new Error('the watch ended');
        catchUp.push(performance.now() - t0);
      } finally {
        ac.abort();
      }
    }
  } catch (err) {
    if (signal.aborted) throw signal.reason;
    found.catchUp = { error: oneLine(err) };
    return found;
  }
  found.catchUp = stats(catchUp);
  return found;
}

/**
 * A lease's life as locks use it: granted (with our own id, so that a grant whose answer is lost
 * can still be revoked), a key attached, renewed `samples` times (timed), revoked.
 */
export async function leaseSteps(client: Client, scratch: Scratch, signal: AbortSignal, samples: number): Promise<LeaseFindings> {
  const key = `${scratch.prefix}lease`;
  const call = { signal };
  const found: LeaseFindings = {
    steps: { grant: 'skipped', attach: 'skipped', renew: 'skipped', revoke: 'skipped' },
    failures: {},
    renewal: null,
  };
  const fail = (step: LeaseStep, err: unknown, what: string, always = false): void => {
    const f = failure(err, signal, what, always);
    found.steps[step] = { error: oneLine(err) };
    found.failures[step] = f;
  };
  const id = randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn || 1n;
  let granted = false;
  try {
    await client.leaseGrant(SCRATCH_LEASE_TTL, { ...call, id });
    granted = true;
    found.steps.grant = 'ok';
  } catch (err) {
    fail('grant', err, 'granting a lease');
  }
  try {
    if (granted) {
      try {
        await scratchPut(client, scratch, key, 'doctor', { ...call, lease: id });
        found.steps.attach = 'ok';
      } catch (err) {
        fail('attach', err, `attaching ${key} to the lease`, true);
      }
    }
    if (found.steps.attach === 'ok') {
      try {
        const times: number[] = [];
        // Each on a stream of its own, so that a refusal is seen as the error it is (the shared
        // keepalive stream of a Session retries refusals quietly until the lease runs out).
        for (let i = 0; i < samples; i++) times.push(await timed(() => client.leaseKeepAliveOnce(id, call)));
        found.renewal = stats(times);
        found.steps.renew = 'ok';
      } catch (err) {
        fail('renew', err, 'renewing a lease');
      }
    }
  } finally {
    if (granted) {
      try {
        await client.leaseRevoke(id);
        found.steps.revoke = 'ok';
      } catch (err) {
        // Not under the signal: the revoke is the cleanup; its message says the lease expires anyway.
        found.steps.revoke = { error: oneLine(err) };
        found.failures.revoke = { message: oneLine(err), denied: err instanceof PermissionDeniedError };
      }
    }
  }
  return found;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** `p`, or an error naming `what` after `ms`. */
function timeout<T>(p: Promise<T>, what: string, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}
