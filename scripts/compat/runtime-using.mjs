// The README's `await using` style, run by the runtimes whose syntax has it (Bun, Deno; Node 20 has
// not): scripts/compat/runtimes.mjs copies it next to runtime-smoke.mjs. The lock, session and
// client are disposed of by leaving the block; afterwards no key is left. Prints `ok`/`not ok`
// lines as runtime-smoke.mjs does.
import assert from 'node:assert/strict';
import { Client, Mutex, Session } from 'etcd-concurrency';

const endpoints = (process.env.ETCDCTL_ENDPOINTS ?? '').split(',').filter(Boolean);
if (endpoints.length === 0) throw new Error('runtime-using: set ETCDCTL_ENDPOINTS to the etcd to use');
const name = `smoke/using/${process.pid}-${Date.now()}`;

let key = '';
let signal;
try {
  {
    await using client = new Client({ endpoints });
    await using session = await Session.create(client, { ttl: 10 });
    await using lock = await new Mutex(session, name).lock({ signal: AbortSignal.timeout(10_000) });
    key = lock.key;
    signal = lock.signal;
    lock.assertHeld();
  }
  assert.equal(signal?.aborted, true, "leaving the block ends the lock's signal");
  await using check = new Client({ endpoints });
  assert.equal(await check.get(key), undefined, `${key} is gone`);
  console.log('ok 1 - await using: the lock, session and client are disposed of at the end of the block');
} catch (err) {
  console.log('not ok 1 - await using: the lock, session and client are disposed of at the end of the block');
  console.log(String(err?.stack ?? err).replace(/^/gm, '  # '));
  process.exitCode = 1;
}
console.log('1..1');
