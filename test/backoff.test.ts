// Backoff with jitter, and sleep (src/client/backoff.ts): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Backoff, sleep } from '../src/client/backoff.js';

describe('Backoff', () => {
  it('doubles from base up to max with the top of the jitter range', () => {
    const b = new Backoff(50, 1000, () => 1);
    assert.deepEqual(
      Array.from({ length: 8 }, () => b.next()),
      [50, 100, 200, 400, 800, 1000, 1000, 1000],
    );
  });

  it('never goes below half the cap (full jitter on the upper half)', () => {
    const b = new Backoff(50, 1000, () => 0);
    assert.deepEqual(
      Array.from({ length: 6 }, () => b.next()),
      [25, 50, 100, 200, 400, 500],
    );
  });

  it('reset starts over from base', () => {
    const b = new Backoff(10, 10_000, () => 1);
    b.next();
    b.next();
    b.next();
    b.reset();
    assert.equal(b.next(), 10);
  });

  it('does not overflow after very many attempts', () => {
    const b = new Backoff(50, 1000, () => 0.5);
    let last = 0;
    for (let i = 0; i < 5000; i++) last = b.next();
    assert.equal(last, 750);
  });
});

describe('sleep', () => {
  it('resolves with undefined, after a timer due earlier (it really waits on a timer)', async () => {
    const order: string[] = [];
    const slept = sleep(20).then((v) => {
      order.push('sleep');
      return v;
    });
    setTimeout(() => order.push('timer due at 0 ms'), 0);
    assert.equal(await slept, undefined);
    assert.deepEqual(order, ['timer due at 0 ms', 'sleep']);
  });

  it('rejects at once with the reason of an already-aborted signal', async () => {
    const reason = new Error('stop');
    await assert.rejects(sleep(60_000, AbortSignal.abort(reason)), (e) => e === reason);
  });

  it('rejects with the reason when aborted during the sleep and leaves no timer', async () => {
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const c = new AbortController();
    const p = sleep(60_000, c.signal);
    assert.equal(timers(), before + 1, 'the sleep runs on one timer');
    const reason = new Error('later');
    c.abort(reason);
    await assert.rejects(p, (e) => e === reason);
    assert.equal(timers(), before, 'its timer is cleared on abort');
  });
});
