import { InvalidArgumentError } from './client/errors.js';
import type { KeyValue } from './client/kv.js';

/** etcd accepts keys up to its request size limit; a name this long is a bug, not a lock name. */
export const MAX_NAME_BYTES = 4096;

/**
 * Checks a lock or election name. The name is used exactly as Go's concurrency package and etcdctl
 * use it, so the same name interoperates: participants are `<name>/<lease id in hex>`.
 */
export function validateName(name: unknown, what = 'name'): string {
  if (typeof name !== 'string') throw new InvalidArgumentError(`${what} must be a string, got ${typeof name}`);
  if (name.length === 0) throw new InvalidArgumentError(`${what} is empty; give a name such as "${exampleName(what)}"`);
  if (name.endsWith('/')) {
    throw new InvalidArgumentError(`${what} "${name}" ends with "/"; drop the trailing slash (keys are "<name>/<lease id>")`);
  }
  if (name.includes('\0')) throw new InvalidArgumentError(`${what} contains a NUL character`);
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new InvalidArgumentError(`${what} is ${Buffer.byteLength(name)} bytes long; keep it under ${MAX_NAME_BYTES} bytes`);
  }
  return name;
}

/** An example name that fits what is being named: an election is not a lock. */
function exampleName(what: string): string {
  return /elect/i.test(what) ? 'elections/scheduler' : 'locks/orders';
}

/** The prefix every participant key of `name` starts with. */
export function prefixOf(name: string): string {
  return `${name}/`;
}

/** `<name>/<lease id in lowercase hex>`: Go's `fmt.Sprintf("%s%x", pfx, leaseID)`. */
export function participantKey(name: string, leaseId: bigint): string {
  return `${prefixOf(name)}${leaseId.toString(16)}`;
}

const HEX = /^[0-9a-f]+$/;

/**
 * Whether `kv` is a participant of the lock or election whose prefix is `prefix`. Keys of nested
 * names (`a/b/...` under lock `a`, etcd issue 6278) and keys without a lease (stray data that
 * would block the queue forever, etcd issue 6631) are not participants and are skipped.
 */
export function isParticipant(prefix: Buffer, kv: KeyValue): boolean {
  return kv.lease !== 0n && isParticipantKey(prefix, kv.key);
}

/**
 * Whether `key` has a participant's form, `<prefix><hex>`: no nested name. For keys-only reads, whose
 * `lease` etcd 3.7 leaves at 0, so that only a full read or a compare can tell stray data apart.
 */
export function isParticipantKey(prefix: Buffer, key: Buffer): boolean {
  return key.length > prefix.length && key.subarray(0, prefix.length).equals(prefix) && HEX.test(key.toString('latin1', prefix.length));
}

const EMPTY = Buffer.alloc(0);

/**
 * `key` as a Buffer of its own, outside Node's shared 8 KB pool: a waiter keeps its prefix for the
 * length of its wait, and one long-lived small slice of the pool would pin the whole slab.
 */
export function ownBuffer(key: string | Buffer): Buffer {
  const n = typeof key === 'string' ? Buffer.byteLength(key) : key.length;
  if (n === 0) return EMPTY; // nothing to write into it, so one serves all (an empty label, say)
  const b = Buffer.allocUnsafeSlow(n);
  if (typeof key === 'string') b.write(key);
  else key.copy(b);
  return b;
}

/** The queue a participant key is in: its prefix, `<name>/` (two coalesced Txns must not share one). */
export function queuePrefix(key: string): string {
  return key.slice(0, key.lastIndexOf('/') + 1);
}
