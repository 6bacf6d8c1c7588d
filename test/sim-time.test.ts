// The simulator's virtual time (src/testing/sim/time.ts): its own timer queue fires timers in the
// order and at the instants @sinonjs/fake-timers does (the simulator's schedules were made with
// it, and their seeds must keep meaning what they meant), and every way to make a timer reaches it
// as the process that made it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { setInterval as every, setImmediate as immediate, setTimeout as sleep } from 'node:timers/promises';
import * as timers from 'node:timers';
import { promisify } from 'node:util';
import { Rng } from '../src/testing/sim/rng.js';
import { VirtualTime } from '../src/testing/sim/time.js';
import { World } from '../src/testing/sim/world.js';

type Clock = { next(): void; countTimers(): number; uninstall(): void; now: number };
const fakeTimers = createRequire(import.meta.url)('@sinonjs/fake-timers') as { install(c: object): Clock };

/**
 * A seeded tangle of timers: each callback records when it ran, then makes one or two more
 * (timeouts, immediates, intervals; delays of 0, fractions, strings, negatives, beyond 2^31) and
 * now and then clears one. Both clocks make the same tangle as long as they fire in the same order.
 */
function tangle(seed: number): { start(): void; log: string[] } {
  const rng = new Rng(seed, 'tangle');
  const log: string[] = [];
  /** Timers that may still fire, each with its clear function. */
  const live: (() => void)[] = [];
  const delays: unknown[] = [0, 0, 1, 2, 5, 2.5, 0.4, 1e-7, -1, undefined, '3', 2 ** 31, 1000];
  let made = 0;
  const make = (): void => {
    if (made >= 400) return;
    const id = made++;
    const kind = rng.int(6);
    const delay = rng.pick(delays);
    const fired = (): void => {
      log.push(`${id}@${Math.round(performance.now())}`);
      for (let i = 1 + rng.int(2); i > 0; i--) make();
      if (live.length > 0 && rng.chance(0.2)) live.splice(rng.int(live.length), 1)[0]!();
    };
    if (kind === 0) {
      const h = setImmediate(fired);
      live.push(() => clearImmediate(h));
    } else if (kind === 1) {
      let n = 0;
      const h: NodeJS.Timeout = setInterval(() => {
        fired();
        if (++n === 3) clearInterval(h);
      }, delay as number);
      live.push(() => clearInterval(h));
    } else {
      const h = setTimeout(fired, delay as number);
      live.push(() => clearTimeout(h));
    }
  };
  return {
    start: () => {
      for (let i = 0; i < 5; i++) make();
    },
    log,
  };
}

test('timers fire in the order and at the instants fake-timers fires them', async () => {
  for (let seed = 1; seed <= 30; seed++) {
    const theirs = tangle(seed);
    const clock = fakeTimers.install({
      now: 0,
      toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'performance'],
    });
    try {
      theirs.start();
      while (clock.countTimers() > 0) clock.next();
    } finally {
      clock.uninstall();
    }
    const ours = tangle(seed);
    const time = new VirtualTime();
    time.install(Math.random);
    try {
      ours.start();
      assert.equal(await time.run(() => false, { steps: 100_000, ms: 1e9 }), 'idle');
    } finally {
      time.uninstall();
    }
    assert.ok(theirs.log.length > 300, `seed ${seed} made a tangle`);
    assert.deepEqual(ours.log, theirs.log, `seed ${seed}`);
  }
});

test('every way to make a timer runs on virtual time, as the process that made it', async () => {
  const world = new World({ seed: 1, members: 1 });
  world.install();
  const seen: string[] = [];
  try {
    const proc = world.proc('app');
    const at = (what: string): void => {
      seen.push(`${what} at ${performance.now()} as ${world.time.current?.name}`);
    };
    let done = false;
    void proc.start(async () => {
      await sleep(1000);
      at('timers/promises setTimeout');
      assert.equal(await immediate('v'), 'v');
      at('timers/promises setImmediate');
      await promisify(setTimeout)(500);
      at('promisify(setTimeout)');
      await new Promise((resolve) => timers.setTimeout(resolve, 250));
      at('node:timers setTimeout');
      let ticks = 0;
      for await (const _ of every(100)) if (++ticks === 3) break;
      at('timers/promises setInterval');
      const aborted = new AbortController();
      setTimeout(() => aborted.abort(), 50);
      await assert.rejects(sleep(1000, undefined, { signal: aborted.signal }), { name: 'AbortError', code: 'ABORT_ERR' });
      at('an aborted sleep');
      assert.equal(new Date().toISOString(), '2026-01-01T00:00:02.100Z');
      done = true;
    });
    assert.equal(await world.time.run(() => done, { steps: 10_000, ms: 60_000 }), 'stopped');
  } finally {
    world.dispose();
  }
  assert.deepEqual(seen, [
    'timers/promises setTimeout at 1000 as app',
    'timers/promises setImmediate at 1000 as app',
    'promisify(setTimeout) at 1500 as app',
    'node:timers setTimeout at 1750 as app',
    'timers/promises setInterval at 2050 as app',
    'an aborted sleep at 2100 as app',
  ]);
  // And real time again once the world is gone.
  const t0 = Date.now();
  await sleep(5);
  assert.ok(Date.now() - t0 >= 4 && Date.now() - t0 < 60_000);
});
