// A loopback TCP proxy that sits between a client and one etcd member, so tests can break the
// network (cut, stall, slow down, refuse) without touching the server process.

import { createServer, connect, type Server, type Socket } from 'node:net';

/** Options for {@link startProxy}. */
export interface StartProxyOptions {
  /** Port to listen on (127.0.0.1). Default: a free one. */
  listenPort?: number;
}

/** A running proxy started by {@link startProxy}. */
export interface TcpProxy extends AsyncDisposable {
  /** `127.0.0.1:port` to give clients instead of the target. */
  readonly endpoint: string;
  /** Open client connections. */
  readonly connections: number;
  /**
   * Client connections accepted and forwarded since the proxy started, closed ones included: whether
   * a client tried this endpoint at all, even if it has since given up on it. Connections reset while
   * {@link TcpProxy.refuse} is on are not counted.
   */
  readonly accepted: number;
  /** Reset every open connection (both sides) now; new connections are still accepted. */
  cut(): void;
  /**
   * While on, nothing is forwarded in either direction, on old and new connections, and no socket
   * is closed: a partition. Bytes stay buffered (the proxy stops reading, so TCP backpressure
   * reaches the sender) and flow again, in order, when it is turned off.
   */
  blackhole(on: boolean): void;
  /** Hold every chunk, in both directions, for `ms` before forwarding; order is kept. 0 disables. */
  delay(ms: number): void;
  /** While on, new connections are accepted and immediately reset; existing ones are untouched. */
  refuse(on: boolean): void;
  /** Close the listener and every connection. Idempotent. */
  close(): Promise<void>;
}

/** One direction of a connection: an ordered queue so delay and blackhole never reorder bytes. */
interface Pump {
  flush(): void;
  cancel(): void;
}

/**
 * Forward `target` (`host:port`) through a new listener on 127.0.0.1.
 *
 * @example
 * ```ts
 * await using proxy = await startProxy(etcd.endpoints[0]!);
 * // point the client at proxy.endpoint, then:
 * proxy.blackhole(true); // partition: nothing flows, nothing closes
 * ```
 */
export async function startProxy(target: string, options: StartProxyOptions = {}): Promise<TcpProxy> {
  const { host, port } = parseHostPort(target);
  let delayMs = 0;
  let blackholed = false;
  let refusing = false;
  let closing: Promise<void> | undefined;
  let accepted = 0;
  const conns = new Set<{ client: Socket; upstream: Socket; pumps: Pump[] }>();

  const pump = (from: Socket, to: Socket): Pump => {
    const queue: { chunk: Buffer; due: number }[] = [];
    let ended = false;
    let endSent = false;
    let draining = false;
    let timer: NodeJS.Timeout | undefined;
    const flush = () => {
      clearTimeout(timer);
      timer = undefined;
      if (blackholed || draining || to.destroyed) return;
      while (queue.length > 0) {
        const head = queue[0]!;
        const wait = head.due - Date.now();
        if (wait > 0) {
          timer = setTimeout(flush, wait);
          return;
        }
        queue.shift();
        // Respect the receiver's backpressure instead of buffering without bound.
        if (!to.write(head.chunk)) {
          draining = true;
          from.pause();
          to.once('drain', () => {
            draining = false;
            if (!blackholed) from.resume();
            flush();
          });
          return;
        }
      }
      if (ended && !endSent) {
        endSent = true;
        to.end();
      }
    };
    from.on('data', (chunk: Buffer) => {
      // max() with the previous due time keeps chunks in order when the delay shrinks.
      const due = Math.max(Date.now() + delayMs, queue.at(-1)?.due ?? 0);
      queue.push({ chunk, due });
      if (!timer) flush();
    });
    // Half-close travels with the data: ending early would drop queued chunks.
    from.on('end', () => {
      ended = true;
      if (!timer) flush();
    });
    return { flush, cancel: () => clearTimeout(timer) };
  };

  /**
   * Abort a socket with RST, like a broken network path. Safe to call twice.
   */
  const reset = (socket: Socket) => {
    if (socket.destroyed) return;
    // resetAndDestroy waits for a connecting socket, and spins on one already ended: destroy both outright.
    if (socket.connecting || socket.writableEnded) socket.destroy();
    else socket.resetAndDestroy();
  };

  // noDelay: Nagle's algorithm on a proxy hop would add latency the real network does not have.
  const server: Server = createServer({ allowHalfOpen: true, noDelay: true }, (client) => {
    if (refusing || closing) {
      client.on('error', () => {});
      reset(client);
      return;
    }
    accepted++;
    const upstream = connect({ host, port, allowHalfOpen: true, noDelay: true });
    const conn = { client, upstream, pumps: [pump(client, upstream), pump(upstream, client)] };
    conns.add(conn);
    if (blackholed) {
      client.pause();
      upstream.pause();
    }
    // An error on one side is a broken path: break the other side too, as a real network would.
    const onError = () => {
      reset(client);
      reset(upstream);
    };
    client.on('error', onError);
    upstream.on('error', onError);
    const onClose = () => {
      if (client.destroyed && upstream.destroyed) {
        conn.pumps.forEach((p) => p.cancel());
        conns.delete(conn);
      }
    };
    client.on('close', onClose);
    upstream.on('close', onClose);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listenPort ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const listenPort = (server.address() as { port: number }).port;

  const destroyAll = () => {
    for (const { client, upstream, pumps } of conns) {
      pumps.forEach((p) => p.cancel());
      reset(client);
      reset(upstream);
    }
    conns.clear();
  };

  const proxy: TcpProxy = {
    endpoint: `127.0.0.1:${listenPort}`,
    get connections() {
      return conns.size;
    },
    get accepted() {
      return accepted;
    },
    cut: destroyAll,
    blackhole(on) {
      blackholed = on;
      for (const { client, upstream, pumps } of conns) {
        if (on) {
          client.pause();
          upstream.pause();
        } else {
          client.resume();
          upstream.resume();
          pumps.forEach((p) => p.flush());
        }
      }
    },
    delay(ms) {
      delayMs = Math.max(0, ms);
    },
    refuse(on) {
      refusing = on;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        destroyAll();
      });
      return closing;
    },
    [Symbol.asyncDispose]() {
      return proxy.close();
    },
  };
  return proxy;
}

function parseHostPort(target: string): { host: string; port: number } {
  // lastIndexOf so a bracketed IPv6 literal like [::1]:2379 also works.
  const i = target.lastIndexOf(':');
  const port = Number(target.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new Error(`proxy: target must be host:port, got ${JSON.stringify(target)}`);
  }
  return { host: target.slice(0, i).replace(/^\[(.*)\]$/, '$1'), port };
}
