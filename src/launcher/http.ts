// Health and leader checks over etcd's HTTP endpoints (/health and the grpc-gateway JSON API), so
// a broken gRPC client can never make the launcher itself misbehave.

import { readFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as https from 'node:https';

// etcd accepts client connections before it is ready to answer them: never hang on one, and keep it
// short because a request stuck on a not-yet-ready member delays noticing that it became ready.
const REQUEST_TIMEOUT_MS = 500;

export type ClientTls = Pick<https.RequestOptions, 'ca' | 'cert' | 'key'>;

export async function loadClientTls(tls: { certFile: string; keyFile: string; trustedCaFile: string }): Promise<ClientTls> {
  const [ca, cert, key] = await Promise.all([tls.trustedCaFile, tls.certFile, tls.keyFile].map((f) => readFile(f)));
  return { ca, cert, key };
}

/**
 * One JSON request with a hard timeout (`timeoutMs`, else half a second) that `signal` may end
 * sooner. node:http with agent:false rather than fetch: it takes a custom CA for https, and leaves
 * no pooled keep-alive sockets behind after stop().
 */
export function requestJson(
  url: string,
  method: 'GET' | 'POST',
  tls: ClientTls | undefined,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<unknown> {
  const timeoutMs = options.timeoutMs ?? REQUEST_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    const body = method === 'POST' ? '{}' : undefined;
    const lib = url.startsWith('https:') ? https : http;
    const req = lib.request(
      url,
      {
        method,
        agent: false,
        timeout: timeoutMs,
        ...(options.signal ? { signal: options.signal } : {}),
        headers: body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {},
        ...tls,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          try {
            resolve(JSON.parse(text));
          } catch {
            reject(new Error(`HTTP ${res.statusCode} from ${url}: ${text.slice(0, 200)}`));
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url} within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}
