import { randomBytes } from 'node:crypto';
import type { Client } from '../client/client.js';
import { EtcdError, PermissionDeniedError } from '../client/errors.js';
import { compare, op, txnRange } from '../client/kv.js';
import { SessionExpiredError } from '../errors.js';
import { markLeaseGone, type Session } from '../session.js';

/**
 * The key (under the client's namespace, if it has one) where an etcd keeps its etcd id: a random id
 * the first fenced write on that etcd creates, so that the fences can tell which etcd a fencing token
 * came from. A wipe, or a new cluster, has no such key and gets a new id, even when its cluster id
 * is the same (a member restarted with the same flags keeps it). Never delete it: to the fences that
 * is the same as replacing etcd. A restore from a snapshot brings back the id the snapshot held.
 */
export const ETCD_ID_KEY = 'etcd-concurrency/etcd-id';

/** `<cluster id, 16 hex>-<64 random bits, 16 hex>`: the cluster it was made on, for a reader; unique by its random half. */
const ETCD_ID = /^[0-9a-f]{16}-[0-9a-f]{16}$/;

/** Per session: a session's tokens all come from the etcd that holds its lease, and it never outlives that etcd. */
const ids = new WeakMap<Session, Promise<string>>();

/**
 * The etcd id of the etcd `session`'s lease lives on: read once per session (and made on first use
 * on an etcd that has none), then kept for the session's life. Nothing needs to invalidate it: a
 * session's lease exists on one etcd only (a wipe or a new cluster has no such lease, so the session
 * ends there), so every token of its handles comes from that etcd. A client that lives across a
 * wipe makes a new session, which reads the new id.
 */
export function etcdIdOf(session: Session): Promise<string> {
  let id = ids.get(session);
  if (!id) {
    id = readEtcdId(session);
    ids.set(session, id);
    id.catch(() => ids.delete(session)); // a failed read is tried again by the next write
  }
  return id;
}

async function readEtcdId(session: Session): Promise<string> {
  const { client } = session;
  const id = await readOrCreate(client);
  if (!ETCD_ID.test(id)) {
    throw new EtcdError(
      `the etcd id at key "${ETCD_ID_KEY}" is ${JSON.stringify(id.slice(0, 80))}, not one this library made (16 hex digits, "-", 16 more): ` +
        'someone else wrote that key. Delete it (the next fenced write makes a new id; fenced resources then need a reset, see the README: "When etcd is replaced")',
    );
  }
  // The id and the session's tokens must come from one etcd. The session's lease, asked for after
  // the id was read, proves it: an etcd that answered the read after a wipe has no such lease.
  const lease = await client.leaseTimeToLive(session.leaseId);
  if (lease.ttl <= 0) {
    markLeaseGone(session);
    throw new SessionExpiredError('lease_gone', session.leaseId);
  }
  return id;
}

/** The id stored, or a new one stored if there is none (create-if-absent: concurrent writers agree on one). */
async function readOrCreate(client: Client): Promise<string> {
  const r = await asking('read', () => client.range({ key: Buffer.from(ETCD_ID_KEY) }));
  const kv = r.kvs[0];
  if (kv) return kv.value.toString();
  const made = `${r.header.clusterId.toString(16).padStart(16, '0')}-${randomBytes(8).toString('hex')}`;
  const t = await asking('create', () =>
    client.txn(
      { compare: [compare.createRevision(ETCD_ID_KEY, '=', 0n)], success: [op.put(ETCD_ID_KEY, made)], failure: [op.get(ETCD_ID_KEY)] },
      { idempotent: true }, // a retry of an applied create takes the failure branch and reads our id
    ),
  );
  return t.succeeded ? made : txnRange(t, 0).kvs[0]!.value.toString();
}

/** `call`, with a refusal by etcd's auth turned into one that says what to grant. */
async function asking<T>(what: 'read' | 'create', call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (!(err instanceof PermissionDeniedError)) throw err;
    const grant = `etcdctl role grant-permission <role> ${what === 'read' ? 'read' : 'readwrite'} ${ETCD_ID_KEY}`;
    throw new PermissionDeniedError(
      what === 'read'
        ? `fencing needs to read the etcd id at key "${ETCD_ID_KEY}" (under the client's namespace, if any), which tells a fence which etcd ` +
            `a token came from, and this user may not: grant its role read on that key (${grant}); readwrite if it may be the first to fence on a fresh etcd, as that write creates the key`
        : `fencing needs the etcd id at key "${ETCD_ID_KEY}" (under the client's namespace, if any), which this etcd does not have yet, and ` +
            `this user may not create it: grant its role readwrite on that key (${grant}), or make one fenced write as a user who may`,
      { cause: err, ...(err.grpcCode === undefined ? {} : { grpcCode: err.grpcCode }) },
    );
  }
}
