// Keys, names and prefixes (src/keys.ts, prefixEnd): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { prefixEnd, type KeyValue } from '../src/client/kv.js';
import { InvalidArgumentError } from '../src/client/errors.js';
import { MAX_NAME_BYTES, isParticipant, participantKey, prefixOf, validateName } from '../src/keys.js';

/** Asserts that `fn` throws InvalidArgumentError whose message matches `re`. */
function rejectsArg(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError, `expected InvalidArgumentError, got ${String(err)}`);
    assert.match(err.message, re);
    return true;
  });
}

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
