// Sessions opened and closed around a test's body.
import { type Client, Session } from '../../src/index.js';
import { assertNoKeys } from './etcd.js';

/** `n` sessions on `client`, each with its own lease; a test closes them with {@link closeAll}. */
export function openSessions(client: Client, n: number, ttl = 30): Promise<Session[]> {
  return Promise.all(Array.from({ length: n }, () => Session.create(client, { ttl })));
}

/** Closes every session (closing revokes its lease: nothing is left); missing ones are skipped. */
export function closeAll(ss: readonly (Session | undefined)[]): Promise<unknown> {
  return Promise.all(ss.map((s) => s?.close()));
}

/** The keys under `prefix`, in key order. */
export async function keysUnder(client: Client, prefix: string): Promise<string[]> {
  return (await client.getPrefix(prefix)).kvs.map((kv) => kv.key.toString());
}

/**
 * Runs `body` with `n` new sessions on `client` (TTL 30 s unless given), closes them whatever
 * happens, then checks that nothing is left under `prefix`.
 */
export async function withSessions<T>(
  client: Client,
  prefix: string,
  sessions: number | { n: number; ttl: number },
  body: (sessions: Session[]) => Promise<T>,
): Promise<T> {
  const { n, ttl } = typeof sessions === 'number' ? { n: sessions, ttl: 30 } : sessions;
  const ss = await openSessions(client, n, ttl);
  let result: T;
  try {
    result = await body(ss);
  } finally {
    await closeAll(ss);
  }
  await assertNoKeys(client, prefix);
  return result;
}
