// Reusing a session after a loss: the stored error a lost session (or an ended
// holding) throws again is the same object, with the stack of the call that threw it now, followed
// by where it was first raised; and docs/locks.md's worker loop (a new session after a loss) works.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LockLostError, Mutex, Session, SessionExpiredError } from '../src/index.js';
import { aborted, etcdForFile } from './helpers.js';
import type { Client } from '../src/index.js';

let client: Client;
const fresh = etcdForFile('test/session-reuse/', (_e, c) => (client = c));

// Named, so that the stacks can be searched for them.
async function lockAgainAfterTheLoss(m: Mutex): Promise<unknown> {
  return m.lock().then(
    () => assert.fail('lock() on a lost session resolved'),
    (err: unknown) => err,
  );
}
function assertHeldAfterTheLoss(h: { assertHeld(): void }): unknown {
  try {
    h.assertHeld();
  } catch (err) {
    return err;
  }
  return assert.fail('assertHeld() did not throw');
}

describe('a stored error thrown again', () => {
  test('lock() on a lost session: the same SessionExpiredError, with the stack of this lock() call, then where it was first raised', async () => {
    const name = `${fresh('lock-again')}lock`;
    const session = await Session.create(client, { ttl: 3 });
    const m = new Mutex(session, name);
    const held = await m.lock();
    await client.leaseRevoke(session.leaseId);
    const lost = await aborted(held.signal);
    assert.ok(lost instanceof LockLostError, String(lost));
    // The session learns it too (its next renewal, within a third of the TTL): what the worker of the issue met.
    assert.ok((await aborted(session.signal)) instanceof SessionExpiredError);

    const first = assertHeldAfterTheLoss(held);
    assert.ok(first instanceof LockLostError);
    assert.match(first.stack!, /assertHeldAfterTheLoss/, 'assertHeld() shows its own caller');

    const err = await lockAgainAfterTheLoss(m);
    assert.ok(err instanceof SessionExpiredError, String(err));
    assert.equal(err, session.signal.reason, 'the same object: signal.reason still identifies it');
    const [now, earlier] = err.stack!.split('--- first raised:');
    assert.match(now!, /lockAgainAfterTheLoss/, `the stack starts at the lock() that threw it:\n${err.stack}`);
    assert.doesNotMatch(now!, /assertHeldAfterTheLoss/, 'not at an earlier, unrelated call');
    assert.ok(earlier && /\bat /.test(earlier), 'then where it was first raised');

    // Thrown again: the stack moves to the new call and keeps one "first raised" part.
    const again = assertHeldAfterTheLoss(held);
    assert.equal(again, first);
    assert.match((again as Error).stack!.split('--- first raised:')[0]!, /assertHeldAfterTheLoss/);
    assert.equal((again as Error).stack!.split('--- first raised:').length, 2);
    await session.close();
  });

  test("docs/locks.md's worker loop: a new session after a loss, and the work goes on", async () => {
    const name = `${fresh('worker')}lock`;
    const done: bigint[] = [];
    let revoked = false;
    // As in docs/locks.md: one session per round; a loss ends the round, the next one makes a new session.
    while (done.length < 2) {
      const session = await Session.create(client, { ttl: 30 });
      try {
        const lock = await new Mutex(session, name).lock();
        if (!revoked) {
          revoked = true;
          await client.leaseRevoke(session.leaseId); // the loss, in the middle of the work
          await aborted(lock.signal);
        }
        lock.assertHeld();
        done.push(lock.fencingToken);
        await lock.unlock();
      } catch (err) {
        if (!(err instanceof LockLostError || err instanceof SessionExpiredError)) throw err;
      } finally {
        await session.close();
      }
    }
    assert.equal(done.length, 2);
  });
});
