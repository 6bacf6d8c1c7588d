// Plain unit tests of the pure logic: no etcd involved.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseEndpoint, parseEndpoints } from '../src/client/endpoints.js';
import { Backoff, sleep } from '../src/client/backoff.js';
import { QueuedIterator } from '../src/client/queued-iterator.js';
import { prefixEnd } from '../src/client/kv.js';
import { InvalidArgumentError } from '../src/client/errors.js';
import { MAX_NAME_BYTES, isParticipant, participantKey, prefixOf, validateName } from '../src/keys.js';
import type { KeyValue } from '../src/client/kv.js';

/** Asserts that `fn` throws InvalidArgumentError whose message matches `re`. */
function rejectsArg(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError, `expected InvalidArgumentError, got ${String(err)}`);
    assert.match(err.message, re);
    return true;
  });
}

describe('parseEndpoints', () => {
  it('accepts host:port as gRPC target, insecure', () => {
    assert.deepEqual(parseEndpoint('127.0.0.1:2379'), { target: '127.0.0.1:2379', secure: false });
  });

  it('defaults the port to 2379', () => {
    assert.deepEqual(parseEndpoint('localhost'), { target: 'localhost:2379', secure: false });
    assert.deepEqual(parseEndpoint('http://etcd.example'), { target: 'etcd.example:2379', secure: false });
  });

  it('takes the scheme (case-insensitively) to decide TLS and strips trailing slashes', () => {
    assert.deepEqual(parseEndpoint('https://etcd:2379/'), { target: 'etcd:2379', secure: true });
    assert.deepEqual(parseEndpoint('HTTP://Etcd:1234'), { target: 'Etcd:1234', secure: false });
  });

  it('accepts bracketed IPv6 with and without port', () => {
    assert.deepEqual(parseEndpoint('[::1]:23790'), { target: '[::1]:23790', secure: false });
    assert.deepEqual(parseEndpoint('https://[fe80::1]'), { target: '[fe80::1]:2379', secure: true });
  });

  it('rejects unbracketed IPv6 and tells how to write it', () => {
    rejectsArg(() => parseEndpoint('::1'), /brackets, like \[::1\]:2379/);
  });

  it('rejects other schemes, paths, missing hosts and bad ports, naming the endpoint', () => {
    rejectsArg(() => parseEndpoint('unix:///tmp/etcd.sock'), /"unix:\/\/\/tmp\/etcd.sock" has scheme unix/);
    rejectsArg(() => parseEndpoint('http://h:1/v3'), /"http:\/\/h:1\/v3" has a path/);
    rejectsArg(() => parseEndpoint(':2379'), /has no host/);
    rejectsArg(() => parseEndpoint('[]:2379'), /has no host/);
    for (const bad of ['h:0', 'h:65536', 'h:abc', 'h:1.5', 'h:-1']) {
      rejectsArg(() => parseEndpoint(bad), new RegExp(`"${bad}" has an invalid port; use a number from 1 to 65535`));
    }
  });

  it('rejects ports that are not plain decimal digits', () => {
    for (const bad of ['h:0x50', 'h:1e3', 'h: 80', 'h:0b1']) {
      rejectsArg(() => parseEndpoint(bad), /invalid port/);
    }
  });

  it('splits a comma-separated string and trims blanks, as ETCDCTL_ENDPOINTS', () => {
    assert.deepEqual(
      parseEndpoints(' a:1, b:2 ,,c ').map((e) => e.target),
      ['a:1', 'b:2', 'c:2379'],
    );
    assert.deepEqual(
      parseEndpoints(['http://x:1', 'y:2']).map((e) => e.target),
      ['x:1', 'y:2'],
    );
  });

  it('rejects an empty list with an example endpoint', () => {
    rejectsArg(() => parseEndpoints(''), /no etcd endpoint given; pass endpoints like "127.0.0.1:2379"/);
    rejectsArg(() => parseEndpoints(' , '), /no etcd endpoint given/);
    rejectsArg(() => parseEndpoints([]), /no etcd endpoint given/);
  });

  it('rejects a mix of http and https', () => {
    rejectsArg(() => parseEndpoints(['http://a:1', 'https://b:2']), /mix http and https/);
  });
});

describe('keys', () => {
  it('participantKey is <name>/<lease id in lowercase unpadded hex>, as Go and etcdctl', () => {
    assert.equal(participantKey('locks/orders', 0x694d7f2a1b3c4d5en), 'locks/orders/694d7f2a1b3c4d5e');
    assert.equal(participantKey('a', 0xabcn), 'a/abc');
    assert.equal(participantKey('a', 0x7fff_ffff_ffff_ffffn), 'a/7fffffffffffffff');
    assert.equal(prefixOf('a'), 'a/');
  });

  it('validateName returns valid names unchanged', () => {
    assert.equal(validateName('locks/orders'), 'locks/orders');
    assert.equal(validateName('x'.repeat(MAX_NAME_BYTES)), 'x'.repeat(MAX_NAME_BYTES));
  });

  it('validateName rejects non-strings, empty, trailing slash and NUL with a hint', () => {
    rejectsArg(() => validateName(42, 'lock name'), /lock name must be a string, got number/);
    rejectsArg(() => validateName(undefined), /name must be a string, got undefined/);
    rejectsArg(() => validateName(''), /is empty; give a name such as "locks\/orders"/);
    rejectsArg(() => validateName('a/'), /ends with "\/"; drop the trailing slash/);
    rejectsArg(() => validateName('a\0b'), /NUL/);
  });

  it('validateName counts bytes, not characters', () => {
    rejectsArg(() => validateName('x'.repeat(MAX_NAME_BYTES + 1)), /4097 bytes long; keep it under 4096 bytes/);
    // 2049 two-byte characters: 2049 characters but 4098 bytes.
    rejectsArg(() => validateName('é'.repeat(2049)), /4098 bytes long/);
  });

  it('isParticipant: only direct children with a lowercase-hex suffix and a lease', () => {
    const prefix = Buffer.from('a/');
    const kv = (key: string, lease: bigint): KeyValue =>
      ({ key: Buffer.from(key), value: Buffer.alloc(0), lease, createRevision: 1n, modRevision: 1n, version: 1n }) as KeyValue;
    assert.equal(isParticipant(prefix, kv('a/694d7f2a1b3c4d5e', 0x694d7f2a1b3c4d5en)), true);
    // Stray data without a lease would block the queue forever (etcd 6631).
    assert.equal(isParticipant(prefix, kv('a/694d7f2a1b3c4d5e', 0n)), false);
    // Keys of a nested lock "a/b" (etcd 6278).
    assert.equal(isParticipant(prefix, kv('a/b/694d', 7n)), false);
    // "b" is valid hex: indistinguishable from the key of lease 0xb, so it counts.
    assert.equal(isParticipant(prefix, kv('a/b', 7n)), true);
    assert.equal(isParticipant(prefix, kv('a/', 7n)), false);
    assert.equal(isParticipant(prefix, kv('a/ABC', 7n)), false);
    assert.equal(isParticipant(prefix, kv('a/xyz', 7n)), false);
  });
});

describe('prefixEnd', () => {
  it('increments the last byte', () => {
    assert.deepEqual(prefixEnd('a/'), Buffer.from('a0'));
    assert.deepEqual(prefixEnd('abc'), Buffer.from('abd'));
  });

  it('drops trailing 0xff bytes before incrementing', () => {
    assert.deepEqual(prefixEnd(Buffer.from([0x61, 0xff, 0xff])), Buffer.from([0x62]));
  });

  it('returns [0] (every key) when all bytes are 0xff or the prefix is empty', () => {
    assert.deepEqual(prefixEnd(Buffer.from([0xff, 0xff])), Buffer.from([0]));
    assert.deepEqual(prefixEnd(''), Buffer.from([0]));
  });

  it('does not modify its input', () => {
    const input = Buffer.from('ab');
    const u8 = new Uint8Array([1, 2, 3]);
    prefixEnd(input);
    prefixEnd(u8);
    assert.deepEqual(input, Buffer.from('ab'));
    assert.deepEqual([...u8], [1, 2, 3]);
  });

  it('encodes strings as UTF-8', () => {
    assert.deepEqual(prefixEnd('é'), Buffer.from([0xc3, 0xaa]));
  });
});

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
});
