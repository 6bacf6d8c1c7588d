// Loopback ports for members: chosen by the OS, or a fixed range from `basePort`.

import { createServer, type Server } from 'node:net';

/** A fixed port from `basePort` is taken; unlike OS-chosen ports, retrying would not help. */
export class EtcdPortError extends Error {
  static readonly code = 'ERR_ETCD_PORT';
  readonly code = EtcdPortError.code;
  override readonly name = 'EtcdPortError';
}

function listen(port: number): Promise<Server> {
  const server = createServer();
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

async function closeAll(servers: (Server | undefined)[]): Promise<void> {
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => (s?.listening ? s.close(() => resolve()) : resolve()))));
}

/** Ask the OS for `n` distinct free ports: hold all listeners open until every port is known. */
export async function freePorts(n: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < n; i++) servers.push(await listen(0));
    return servers.map((s) => (s.address() as { port: number }).port);
  } finally {
    await closeAll(servers);
  }
}

/** `basePort`, `basePort + 1`, ... `basePort + n - 1`, after checking that each is free now. */
export async function fixedPorts(basePort: number, n: number, describe: (i: number) => string): Promise<number[]> {
  if (!Number.isInteger(basePort) || basePort < 1 || basePort + n - 1 > 65535) {
    throw new RangeError(`etcd: basePort must be an integer from 1 to ${65536 - n} (${n} ports from it), got ${basePort}`);
  }
  const ports = Array.from({ length: n }, (_, i) => basePort + i);
  const servers = await Promise.all(ports.map((p) => listen(p).catch((err: NodeJS.ErrnoException) => err)));
  await closeAll(servers.map((s) => (s instanceof Error ? undefined : s)));
  const busy = servers.findIndex((s) => s instanceof Error);
  if (busy >= 0) {
    const err = servers[busy] as NodeJS.ErrnoException;
    throw new EtcdPortError(
      `etcd: port ${ports[busy]} (${describe(busy)}) on 127.0.0.1 is not available (${err.code ?? err.message}); ` +
        `the cluster needs ports ${ports[0]}-${ports[n - 1]}: choose another basePort or free them`,
    );
  }
  return ports;
}
