// Helpers shared by the Mutex test files (mutex, mutex-loss).
import { Client, type LockHandle, Mutex, type Session } from '../src/index.js';
import { startProxy, type TcpProxy } from '../src/testing/index.js';
import { type EtcdFile, EventLog, assertNoKeys, closeAll } from './helpers.js';

/** What {@link withProxiedWaiter} hands a test. */
export interface ProxiedWaiter {
  /** The lock's name, under the test's own prefix. */
  name: string;
  /** The proxy between session `b`'s client and etcd: to delay or cut b's answers. */
  proxy: TcpProxy;
  /** The lock, held by a session on the file's client. */
  held: LockHandle;
  /** A session on a client through the proxy. */
  b: Session;
  /** Every event under the lock's name, seen directly (not through the proxy). */
  log: EventLog;
}

/**
 * Runs `body` with the lock held by a session on the file's client and session `b` on a client
 * through a proxy; then lifts any delay, closes everything and checks that nothing is left under the
 * test's prefix.
 */
export async function withProxiedWaiter(file: EtcdFile, scope: string, body: (t: ProxiedWaiter) => Promise<void>): Promise<void> {
  const { etcd, client } = file.cluster();
  const p = file.fresh(scope);
  const name = `${p}lock`;
  const proxy = await startProxy(etcd.endpoints[0]!);
  const slow = new Client({ endpoints: proxy.endpoint });
  const [a] = await file.sessions(1);
  const [b] = await file.sessions(1, 30, slow);
  const log = new EventLog(client, `${name}/`);
  try {
    await log.ready;
    const held = await new Mutex(a!, name).lock();
    await body({ name, proxy, held, b: b!, log });
  } finally {
    proxy.delay(0);
    await log.close();
    await closeAll([a!, b!]);
    await slow.close();
    await proxy.close();
  }
  await assertNoKeys(client, p);
}
