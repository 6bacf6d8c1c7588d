// TLS name checks and ALPN, against TLS servers on loopback whose certificate names a DNS name
// only (as members' certificates often do): connecting by IP fails verification with a message
// that says so, `tls.serverName` verifies against the name instead, and a TLS server that does not
// agree to HTTP/2 is reported as such.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import * as tls from 'node:tls';
import { before, describe, it } from 'node:test';
import { Client, UnavailableError } from '../src/index.js';
import { hasOpenssl, testCerts } from './helpers.js';

const NAME = 'etcd.example.test';
let ca: Buffer;
let cert: Buffer;
let key: Buffer;

before(async () => {
  if (!hasOpenssl()) return;
  const certs = await testCerts('tls-names', [], { subject: `/CN=${NAME}`, altName: `DNS:${NAME}` });
  [ca, cert, key] = await Promise.all(['ca.pem', 'node.pem', 'node.key'].map((f) => readFile(certs.file(f))));
});

/** A TLS gRPC server answering every call with an empty message and status OK. */
async function grpcOverTls(): Promise<{ endpoint: string; close(): Promise<void> }> {
  const server = http2.createSecureServer({ cert, key });
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(Buffer.alloc(5));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('TLS server names and ALPN', { skip: !hasOpenssl() && 'needs openssl' }, () => {
  it('a certificate naming only a DNS name, reached by IP: refused, and the message says why', async () => {
    const server = await grpcOverTls();
    const client = new Client({ endpoints: server.endpoint, tls: { ca }, dialTimeoutMs: 2000, callTimeoutMs: 4000 });
    try {
      await assert.rejects(
        client.get('k'),
        (e: unknown) =>
          e instanceof UnavailableError && /TLS handshake failed/.test(e.message) && /altnames|does not match/i.test(e.message),
      );
    } finally {
      await client.close();
      await server.close();
    }
  });

  it('tls.serverName: the same server verifies against the name and answers', async () => {
    const server = await grpcOverTls();
    const client = new Client({ endpoints: server.endpoint, tls: { ca, serverName: NAME } });
    try {
      assert.equal(await client.get('k'), undefined);
    } finally {
      await client.close();
      await server.close();
    }
  });

  it('a TLS server that does not agree to HTTP/2 (no ALPN h2): UnavailableError that says so', async () => {
    const sockets = new Set<tls.TLSSocket>();
    const server = tls.createServer({ cert, key }, (socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const endpoint = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const client = new Client({ endpoints: endpoint, tls: { ca, serverName: NAME }, dialTimeoutMs: 2000, callTimeoutMs: 4000 });
    try {
      await assert.rejects(
        client.get('k'),
        (e: unknown) => e instanceof UnavailableError && /does not speak HTTP\/2 \(ALPN none\)/.test(e.message),
      );
    } finally {
      await client.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
