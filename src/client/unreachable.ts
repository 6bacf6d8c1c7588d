// Why an endpoint could not be reached, for the error message: a failed HTTP/2 connection says
// little, while a plain TCP or TLS handshake names the cause (refused, silence, wrong CA, not etcd).
import * as net from 'node:net';
import * as tls from 'node:tls';
import type { Endpoint } from './endpoints.js';
import type { TlsOptions } from './options.js';

export function silence(ms: number): string {
  return `nothing answered within ${ms} ms: the server may be hung or paused, the host down, or packets dropped`;
}

/**
 * Finds out why an endpoint could not be reached, for the error message: gRPC only says the
 * channel failed, while a plain TCP or TLS handshake names the cause (refused, timeout, wrong CA).
 */
export function diagnose(
  endpoint: Endpoint,
  timeoutMs: number,
  tlsOptions: TlsOptions | undefined | null,
  signal?: AbortSignal,
): Promise<string> {
  const i = endpoint.target.lastIndexOf(':');
  const host = endpoint.target.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(endpoint.target.slice(i + 1));
  return new Promise((resolve) => {
    const socket =
      tlsOptions === null
        ? net.connect({ host, port })
        : tls.connect({
            host,
            port,
            // SNI takes names, not addresses; the name the certificate must carry, when given.
            ...((tlsOptions?.serverName ?? (net.isIP(host) ? undefined : host)) !== undefined && {
              servername: tlsOptions?.serverName ?? host,
            }),
            ALPNProtocols: ['h2'],
            ...(tlsOptions?.ca !== undefined && { ca: tlsOptions.ca }),
            ...(tlsOptions?.cert !== undefined && { cert: tlsOptions.cert }),
            ...(tlsOptions?.key !== undefined && { key: tlsOptions.key }),
          });
    const done = (why: string): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve(why);
    };
    const onAbort = (): void => done('the call was aborted');
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => done(silence(Math.round(timeoutMs))), timeoutMs);
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED') return done('connection refused: nothing listens on that port');
      if (tlsOptions !== null) {
        return done(
          `TLS handshake failed: ${err.message}; check the CA certificate (--cacert), the client certificate and key, and that the server certificate names this host`,
        );
      }
      done(err.message);
    });
    if (tlsOptions !== null) {
      socket.once('secureConnect', () => {
        const alpn = (socket as tls.TLSSocket).alpnProtocol;
        if (alpn !== 'h2')
          return done(
            `the TLS handshake went through but the server does not speak HTTP/2 (ALPN ${alpn || 'none'}): is this an etcd client port?`,
          );
        done(
          'the TLS handshake went through but the server then refused: it may require a client certificate (--cert and --key) signed by its CA, or this is not an etcd client port',
        );
      });
    } else {
      // Speak first, as an HTTP/2 client does: the answer (or silence) tells what is listening.
      socket.once('connect', () =>
        socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])])),
      );
      socket.once('data', (chunk: Buffer) =>
        done(
          chunk[0] === 0x15 || chunk[0] === 0x16
            ? 'the server speaks TLS: use https:// endpoints and pass its CA certificate (--cacert)'
            : 'the server answers HTTP/2 but gRPC failed: is this an etcd client port?',
        ),
      );
      socket.once('end', () =>
        done('the server closed the connection without answering: if it uses TLS, use https:// endpoints and pass its CA certificate'),
      );
    }
  });
}
