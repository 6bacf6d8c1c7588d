// The bridge from push to `for await` (src/client/queued-iterator.ts): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { QueuedIterator } from '../src/client/queued-iterator.js';

describe('QueuedIterator', () => {
  it('queues pushed values until pulled, in order', async () => {
    const q = new QueuedIterator<number>();
    q.push(1);
    q.push(2);
    assert.equal(q.pending, 2);
    assert.deepEqual(await q.next(), { value: 1, done: false });
    assert.deepEqual(await q.next(), { value: 2, done: false });
    assert.equal(q.pending, 0);
  });

  it('a pull waiting for a value resolves on push', async () => {
    const q = new QueuedIterator<string>();
    const p = q.next();
    q.push('x');
    assert.deepEqual(await p, { value: 'x', done: false });
  });

  it('end() lets the queue drain, then finishes', async () => {
    const q = new QueuedIterator<number>();
    q.push(1);
    q.end();
    assert.equal(q.ended, true);
    q.push(2); // ignored after end
    assert.deepEqual(await q.next(), { value: 1, done: false });
    assert.deepEqual(await q.next(), { value: undefined, done: true });
    assert.deepEqual(await q.next(), { value: undefined, done: true });
  });

  it('end(err) rejects a waiting pull with err', async () => {
    const q = new QueuedIterator<number>();
    const p = q.next();
    const err = new Error('boom');
    q.end(err);
    await assert.rejects(p, (e) => e === err);
  });

  it('end(err) after queued values: values first, then err once, then done', async () => {
    const q = new QueuedIterator<number>();
    q.push(1);
    const err = new Error('boom');
    q.end(err);
    assert.deepEqual(await q.next(), { value: 1, done: false });
    await assert.rejects(q.next(), (e) => e === err);
    assert.deepEqual(await q.next(), { value: undefined, done: true });
  });

  it('for await ends with the error passed to end()', async () => {
    const q = new QueuedIterator<number>();
    q.push(1);
    q.push(2);
    const err = new Error('end');
    q.end(err);
    const seen: number[] = [];
    await assert.rejects(
      (async () => {
        for await (const v of q) seen.push(v);
      })(),
      (e) => e === err,
    );
    assert.deepEqual(seen, [1, 2]);
  });

  it('breaking out of for await calls onClose exactly once and drops queued values', async () => {
    let closed = 0;
    const q = new QueuedIterator<number>(() => closed++);
    q.push(1);
    q.push(2);
    for await (const v of q) {
      assert.equal(v, 1);
      break;
    }
    assert.equal(closed, 1);
    assert.equal(q.pending, 0);
    assert.equal(q.ended, true);
    q.end();
    await q.return();
    assert.equal(closed, 1);
  });

  it('end() also calls onClose once', () => {
    let closed = 0;
    const q = new QueuedIterator<number>(() => closed++);
    q.end();
    q.end(new Error('again'));
    assert.equal(closed, 1);
  });

  it('pulls made before any value (Promise.all of next()) each get one, in order; end() settles every one left', async () => {
    const q = new QueuedIterator<number>();
    const [a, b, c, d] = [q.next(), q.next(), q.next(), q.next()];
    q.push(1);
    q.push(2);
    assert.deepEqual(await Promise.all([a, b]), [
      { value: 1, done: false },
      { value: 2, done: false },
    ]);
    const err = new Error('ended');
    q.end(err);
    await assert.rejects(c, (e) => e === err);
    assert.deepEqual(await d, { value: undefined, done: true });
    assert.deepEqual(await q.next(), { value: undefined, done: true });
  });
});
