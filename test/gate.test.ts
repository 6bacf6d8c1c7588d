// The in-process turns of one session's key (src/queue/gate.ts): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Exit, Gates } from '../src/queue/gate.js';
import { settle, track } from './helpers/waiting.js';

const live = new AbortController().signal;

describe('Gates', () => {
  it('an exclusive turn waits for every holder; shared turns hold together', async () => {
    const g = new Gates();
    const r1 = g.tryEnter('k', true)!;
    const r2 = g.tryEnter('k', true)!;
    assert.ok(r1 instanceof Exit && r2 instanceof Exit, 'two shared turns at once');
    assert.equal(g.tryEnter('k', false), undefined, 'exclusive: busy');
    const w = track(g.enter('k', false, live));
    // FIFO: a shared turn asked for behind a waiting exclusive one waits too.
    assert.equal(g.tryEnter('k', true), undefined);
    const r3 = track(g.enter('k', true, live));
    r1.leave();
    await settle();
    assert.equal(w.settled, false);
    r2.leave();
    await settle();
    assert.equal(w.settled, true);
    assert.equal(r3.settled, false, 'behind the exclusive turn');
    (w.value as Exit).leave();
    await settle();
    assert.equal(r3.settled, true);
    (r3.value as Exit).leave();
  });

  it('enterAfterHolders: waits for the holders of now, then holds along with the shared turns behind it', async () => {
    const g = new Gates();
    const r1 = g.tryEnter('k', true)!;
    const after = track(g.enterAfterHolders('k', live));
    await settle();
    assert.equal(after.settled, false, 'a holder is there');
    assert.equal(g.tryEnter('k', true), undefined, 'later shared turns queue behind it');
    const later = track(g.enter('k', true, live));
    r1.leave();
    await settle();
    assert.ok(after.settled && later.settled, 'both hold once the holder left');
    assert.equal(g.tryEnter('k', false), undefined);
    (after.value as Exit).leave();
    (later.value as Exit).leave();
    const x = g.tryEnter('k', false);
    assert.ok(x, 'free again');
    x.leave();
  });

  it('enterAfterHolders holds at once on a free gate; an abort takes a waiting turn out and lets the next one go', async () => {
    const g = new Gates();
    const a = await g.enterAfterHolders('k', live);
    const ac = new AbortController();
    const w = track(g.enterAfterHolders('k', live, ac.signal));
    const s = track(g.enter('k', true, live));
    await settle();
    assert.equal(w.settled || s.settled, false);
    ac.abort(new Error('gave up'));
    await assert.rejects(w.promise, /gave up/);
    await settle();
    assert.equal(s.settled, true, 'a shared turn goes along with the shared holder once nobody waits ahead of it');
    a.leave();
    (s.value as Exit).leave();
  });
});
