// QueueLengths (src/queue/state.ts) alone: what the enqueue remembers of each queue's length.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueueLengths, SHORT_QUEUE } from '../src/queue/state.js';

const b = (prefix: string): Buffer => Buffer.from(prefix);

describe('QueueLengths', () => {
  it('the newest count by revision decides', () => {
    const l = new QueueLengths();
    assert.equal(l.short(b('a/')), false); // never counted
    l.note(b('a/'), 1n, 10n);
    assert.equal(l.short(b('a/')), false); // ours alone
    l.note(b('a/'), 3n, 11n);
    assert.equal(l.short(b('a/')), true);
    l.note(b('a/'), 1n, 9n); // an older answer arriving late: ignored
    assert.equal(l.short(b('a/')), true);
    l.note(b('a/'), SHORT_QUEUE + 1n, 12n);
    assert.equal(l.short(b('a/')), false); // long
    l.note(b('b/'), 2n, 13n);
    assert.equal(l.short(b('b/')), true);
    l.note(b('a/'), 2n, 14n);
    assert.equal(l.short(b('a/')), true);
    l.note(b('a/'), 1n, 15n);
    assert.equal(l.short(b('a/')), false);
    assert.equal(l.short(b('b/')), true);
  });

  it('keeps the 1,024 prefixes counted most recently: one noted again is recent again', () => {
    const l = new QueueLengths();
    l.note(b('first'), 2n, 1n);
    l.note(b('second'), 2n, 2n);
    l.note(b('second'), 3n, 3n);
    l.note(b('first'), 2n, 4n); // first is now newer than second
    for (let i = 0; i < 1022; i++) l.note(b(`q${i}`), 2n, BigInt(5 + i));
    assert.equal(l.short(b('first')), true);
    assert.equal(l.short(b('second')), true);
    l.note(b('one more'), 2n, 2000n); // 1,025 prefixes: the least recent (second) goes
    assert.equal(l.short(b('second')), false);
    assert.equal(l.short(b('first')), true);
    l.note(b('another'), 2n, 2001n); // then first, older than every q
    assert.equal(l.short(b('first')), false);
    assert.equal(l.short(b('q0')), true);
  });
});
