// One etcd per test file, and the checks every file makes at its end: no key, no lease left.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { after, before } from 'node:test';
import { Client } from '../../src/index.js';
import { startEtcd, type EtcdCluster } from '../../src/testing/index.js';

/** A key prefix no other test uses: `test/<scope>/<random>/`. Names passed to locks live under it. */
export function uniquePrefix(scope: string): string {
  return `test/${scope.replace(/[^A-Za-z0-9_.-]+/g, '-')}/${randomBytes(4).toString('hex')}/`;
}

/**
 * One single-member etcd for a test file and a client on it, handed to `ready` before the tests run.
 * After them: `beforeChecks` (for example killing child processes), then the checks every file
 * makes (no key left under `root`, no lease left), then everything is stopped. Returns `fresh`,
 * which gives each test its own prefix under `root`.
 */
export function etcdForFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): (scope: string) => string {
  let etcd: EtcdCluster | undefined;
  let client: Client | undefined;
  before(async () => {
    etcd = await startEtcd();
    client = new Client({ endpoints: etcd.endpoints });
    ready(etcd, client);
  });
  after(async () => {
    try {
      await options.beforeChecks?.();
    } finally {
      await assertCleanAndStop(client, etcd, root);
    }
  });
  return (scope) => `${root}${uniquePrefix(scope).slice('test/'.length)}`;
}

/**
 * A 3-member etcd for a test file and one client per member, each listing all three endpoints starting
 * at its own member, handed to `ready` (awaited) before the tests run. After them: the cluster healthy again,
 * no key left under `root`, no lease, then everything is stopped. Returns `fresh` (see etcdForFile).
 */
export function clusterForFile(
  root: string,
  ready: (etcd: EtcdCluster, clients: Client[]) => void | Promise<void>,
): (scope: string) => string {
  let etcd: EtcdCluster | undefined;
  let clients: Client[] = [];
  before(async () => {
    etcd = await startEtcd({ members: 3 });
    const eps = etcd.endpoints;
    clients = eps.map((_, i) => new Client({ endpoints: [...eps.slice(i), ...eps.slice(0, i)] }));
    await ready(etcd, clients);
  });
  after(async () => {
    try {
      await etcd!.waitHealthy();
      await assertNoKeys(clients[0]!, root);
      await assertNoLeases(clients[0]!);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
      await etcd?.stop();
    }
  });
  return (scope) => `${root}${uniquePrefix(scope).slice('test/'.length)}`;
}

/**
 * The end of a file's etcd: no key left under `roots` and no lease (as `client` sees them), then
 * the client closed and etcd stopped, also when a check fails.
 */
export async function assertCleanAndStop(
  client: Client | undefined,
  etcd: EtcdCluster | undefined,
  roots: string | readonly string[],
): Promise<void> {
  try {
    for (const root of typeof roots === 'string' ? [roots] : roots) await assertNoKeys(client!, root);
    await assertNoLeases(client!);
  } finally {
    await client?.close();
    await etcd?.stop();
  }
}

/** A loopback TCP port that nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Asserts that nothing is stored under `prefix`. */
export async function assertNoKeys(client: Client, prefix: string): Promise<void> {
  const r = await client.getPrefix(prefix);
  assert.deepEqual(
    r.kvs.map((kv) => kv.key.toString()),
    [],
    `keys left under ${prefix}`,
  );
}

/** Asserts that etcd holds no lease at all (each test file owns its etcd). */
export async function assertNoLeases(client: Client): Promise<void> {
  const leases = await client.leaseLeases();
  assert.deepEqual(
    leases.map((l) => l.toString(16)),
    [],
    'leases left behind',
  );
}
