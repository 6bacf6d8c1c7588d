// OpenTelemetry without an SDK, on real etcd: the hot path calls no instrument and starts no span,
// and the global providers are used once an SDK registers them (also one registered before the
// Client).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { metrics, trace } from '@opentelemetry/api';
import { Client, Election, Mutex, Session } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { Sdk } from './metrics-sdk.js';
import { telemetryOf } from '../src/metrics/telemetry.js';
import { aborted, assertNoKeys, closeAll, etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/metrics-no-sdk/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const LOCK = { [ATTR.kind]: 'lock' };

/**
 * Counts every call the library makes on a client's instruments (record, add) and its tracer
 * (startSpan), through counting stand-ins put on that client's telemetry object (the library reads
 * its instruments from it at each call); `restore()` puts the originals back.
 */
function spyOnTelemetry(c: Client): { calls: Map<string, number>; restore(): void } {
  // The client's own instruments (calls, failovers, watch resumes) on its telemetry, the locks' on theirs.
  const own = new Set(['rpcDuration', 'watchResumes', 'failovers']);
  type Fields = Record<string, Record<string, (...args: unknown[]) => unknown>>;
  const telOf = (field: string): Fields => (own.has(field) ? c.telemetry : telemetryOf(c)) as unknown as Fields;
  const calls = new Map<string, number>();
  const undo: (() => void)[] = [];
  // Each of this client's instruments is replaced by a counting stand-in of its own: the no-op
  // instruments are singletons of @opentelemetry/api, shared with every other client of this process.
  const wrap = (field: string, method: string, label: string): void => {
    const tel = telOf(field);
    const original = tel[field]!;
    const standIn = Object.create(original) as Record<string, (...args: unknown[]) => unknown>;
    standIn[method] = (...args: unknown[]) => {
      calls.set(label, (calls.get(label) ?? 0) + 1);
      return original[method]!.apply(original, args);
    };
    Object.defineProperty(tel, field, { configurable: true, writable: true, value: standIn });
    undo.push(() => Object.defineProperty(tel, field, { configurable: true, writable: true, value: original }));
  };
  const instruments = {
    acquireDuration: 'record',
    holdDuration: 'record',
    keepaliveDuration: 'record',
    rpcDuration: 'record',
    held: 'add',
    waiting: 'add',
    losses: 'add',
    leader: 'add',
    transitions: 'add',
    sessionLosses: 'add',
    watchResumes: 'add',
    failovers: 'add',
  } as const;
  for (const [name, method] of Object.entries(instruments)) wrap(name, method, `${name}.${method}`);
  wrap('tracer', 'startSpan', 'tracer.startSpan');
  return { calls, restore: () => undo.reverse().forEach((u) => u()) };
}

/** A lock cycle, a wait behind a holder, a release, a loss to a delete and a closed session: every hot path. */
async function exercise(c: Client, p: string): Promise<void> {
  const [a, b] = await Promise.all([Session.create(c), Session.create(c)]);
  try {
    const holder = await new Mutex(a!, `${p}lock`).lock();
    const waiter = track(new Mutex(b!, `${p}lock`).lock());
    await waitFor(async () => (await client.getPrefix(`${p}lock/`)).kvs.length === 2, 'the waiter queued');
    await holder.unlock();
    const h = await settledOrHang(waiter, 'the waiter gets the lock');
    const lost = aborted(h.signal);
    await client.delete(h.key);
    await lost;
    await h.unlock();
    await (await new Election(a!, `${p}election`).campaign('v')).resign();
  } finally {
    await closeAll([a, b]);
  }
}

describe('without an SDK', () => {
  it('the hot path makes no OpenTelemetry call: no probe, no instrument records, no span starts', async () => {
    const p = fresh('noop');
    const c = new Client({ endpoints: etcd.endpoints });
    const spy = spyOnTelemetry(c);
    try {
      assert.equal(c.telemetry.metricsOn, false);
      assert.equal(telemetryOf(c).metricsOn, false);
      assert.equal(telemetryOf(c).tracing(), false);
      assert.equal(telemetryOf(c).startAcquire('lock', `${p}lock`), undefined);
      await exercise(c, p);
      assert.deepEqual(Object.fromEntries(spy.calls), {}, 'no instrument or tracer was called');
    } finally {
      spy.restore();
      await c.close();
    }
    // The spy sees calls where there are some: the same paths with an SDK call every instrument used.
    await using sdk = new Sdk(etcd.endpoints);
    const counted = spyOnTelemetry(sdk.client);
    try {
      await exercise(sdk.client, `${p}sdk/`);
      for (const label of [
        'acquireDuration.record',
        'holdDuration.record',
        'rpcDuration.record',
        'held.add',
        'waiting.add',
        'losses.add',
        'leader.add',
        'tracer.startSpan',
      ]) {
        assert.ok((counted.calls.get(label) ?? 0) > 0, `${label} called with an SDK: ${JSON.stringify(Object.fromEntries(counted.calls))}`);
      }
    } finally {
      counted.restore();
    }
    await assertNoKeys(client, p);
  });

  it('the global providers are used once an SDK registers them (and a provider registered earlier than the Client)', async () => {
    const p = fresh('global');
    const sdk = new Sdk(etcd.endpoints); // its own client is unused here
    assert.ok(metrics.setGlobalMeterProvider(sdk.meterProvider));
    assert.ok(trace.setGlobalTracerProvider(sdk.tracerProvider));
    try {
      const c = new Client({ endpoints: etcd.endpoints });
      const s = await Session.create(c);
      try {
        assert.equal(c.telemetry.metricsOn, true);
        assert.equal(telemetryOf(c).metricsOn, true);
        await (await new Mutex(s, `${p}lock`).lock()).unlock();
        assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.result]: 'acquired' }), 1);
        assert.equal(sdk.finished('lock.acquire').length, 1);
      } finally {
        await closeAll([s]);
        await c.close();
      }
    } finally {
      metrics.disable();
      trace.disable();
      await sdk[Symbol.asyncDispose]();
    }
  });
});
