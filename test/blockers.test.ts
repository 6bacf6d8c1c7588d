// The turn rule's blocker without etcd (src/queue/oldest.ts, PredecessorBlocker): which events of
// the key just before ours end a wait, what a mark means, and what its check accepts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { KeyValue } from '../src/client/kv.js';
import type { WatchEvent } from '../src/client/watch.js';
import { PredecessorBlocker } from '../src/queue/oldest.js';
import type { Session } from '../src/session.js';
import type { Ticket } from '../src/queue/enqueue.js';

const OUR_LEASE = 0xabcn;
const THEIR_LEASE = 0x7n;
const session = { leaseId: OUR_LEASE } as Session;
const ticket = { key: `lock/${OUR_LEASE.toString(16)}`, fencingToken: 20n } as Ticket;
const predKey = Buffer.from(`lock/${THEIR_LEASE.toString(16)}`);

function kv(over: Partial<KeyValue>): KeyValue {
  return {
    key: predKey,
    createRevision: 10n,
    modRevision: 10n,
    version: 1n,
    lease: THEIR_LEASE,
    value: Buffer.alloc(0),
    ...over,
  } as KeyValue;
}
const put = (over: Partial<KeyValue>): WatchEvent => ({ type: 'put', kv: kv(over) });
const del = (): WatchEvent => ({ type: 'delete', kv: kv({ modRevision: 30n }) });

function blocker(marks: boolean, marked = false): PredecessorBlocker {
  return new PredecessorBlocker(
    { session, ticket, marks },
    { key: predKey.toString(), createRevision: 10n, asOf: 21n, leased: true, marked },
  );
}

describe('PredecessorBlocker', () => {
  it('its delete ends the wait; behind a marked key (marks on) nothing older is left', () => {
    const plain = blocker(true);
    assert.equal(plain.changed(del()), true);
    assert.equal(plain.headGone, false, 'an unmarked key may have been a waiter that gave up: ask again');
    const marked = blocker(true, true);
    assert.equal(marked.changed(del()), true);
    assert.equal(marked.headGone, true);
    const noMarks = blocker(false, true);
    noMarks.changed(del());
    assert.equal(noMarks.headGone, false, 'an election never trusts a mark');
  });

  it('a put on its own lease, same incarnation, is no change; with marks it is the mark', () => {
    const b = blocker(true);
    assert.equal(b.changed(put({ version: 2n, modRevision: 25n })), false);
    assert.equal(b.changed(del()), true);
    assert.equal(b.headGone, true, 'marked by its owner meanwhile');
  });

  it('moved off any lease, or a new incarnation, ends the wait; a move onto another lease is no mark', () => {
    assert.equal(blocker(true).changed(put({ lease: 0n, modRevision: 25n })), true, 'stray now');
    assert.equal(blocker(true).changed(put({ createRevision: 26n, modRevision: 26n })), true, 'a delete we did not see');
    const moved = blocker(true);
    assert.equal(moved.changed(put({ lease: 0x99n, version: 2n, modRevision: 25n })), false);
    moved.changed(del());
    assert.equal(moved.headGone, false, 'a put onto another lease is someone else’s write, not the holder’s mark');
  });

  it('its check: blocked while our key stands on our lease and the predecessor is that incarnation on some lease; a lease-less one is stray', () => {
    const mine = { key: Buffer.from(ticket.key), createRevision: 20n, lease: OUR_LEASE } as KeyValue;
    assert.deepEqual(blocker(true).keys, [ticket.key, predKey.toString()]);
    assert.equal(blocker(true).blocked([mine, kv({})]), true);
    assert.equal(blocker(true).blocked([undefined, kv({})]), false, 'our key gone: the rule tells the loss');
    assert.equal(blocker(true).blocked([{ ...mine, lease: 0n } as KeyValue, kv({})]), false, 'our key moved off our lease');
    assert.equal(blocker(true).blocked([mine, undefined]), false, 'the predecessor is gone');
    const stray = blocker(true);
    assert.equal(stray.blocked([mine, kv({ lease: 0n })]), false);
    assert.equal(stray.stray, `10/${predKey.toString('latin1')}`, 'remembered as stray for the next look-up');
  });
});
