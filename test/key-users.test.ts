// The calls of one process on one key of a session, counted (src/queue/key-users.ts): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { KeyUsers } from '../src/queue/key-users.js';

describe('KeyUsers', () => {
  it('the first enqueue is the first user; another of the same incarnation joins it; the last to leave deletes', () => {
    const u = new KeyUsers();
    const a = u.begin('k');
    const b = u.begin('k');
    assert.equal(u.join('k', a, 10n), false);
    assert.equal(u.join('k', b, 10n), true);
    assert.equal(u.leave('k', 10n), false, 'left to the other user');
    assert.equal(u.leave('k', 10n), true, 'the last one deletes');
    assert.equal(u.of('k'), undefined);
  });

  it('an answer about an incarnation older than the one counted is not counted, and says so (the call enqueues again)', () => {
    const u = new KeyUsers();
    const late = u.begin('k');
    const fresh = u.begin('k');
    // The key was deleted and created again: the newer answer arrives first.
    assert.equal(u.join('k', fresh, 20n), false);
    assert.equal(u.join('k', late, 10n), undefined, 'stale: no ticket may be built on it');
    assert.equal(u.of('k')?.users, 1);
    const again = u.begin('k');
    assert.equal(u.join('k', again, 20n), true, 'enqueued again, it joins the incarnation of now');
  });

  it('a newer incarnation starts a new count (the old one was deleted)', () => {
    const u = new KeyUsers();
    const a = u.begin('k');
    u.join('k', a, 10n);
    const b = u.begin('k');
    assert.equal(u.join('k', b, 30n), false);
    assert.equal(u.leave('k', 10n), true, 'the old incarnation is no longer counted: its holder deletes it (guarded)');
    assert.equal(u.leave('k', 30n), true);
  });
});
