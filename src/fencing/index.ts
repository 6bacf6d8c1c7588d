/**
 * Fencing where the resource lives (`etcd-concurrency/fencing`): PostgreSQL and Redis refuse a
 * write whose fencing token is lower than the highest they have stored, so a holder that lost its
 * lock without knowing (paused, cut off past its TTL) cannot overwrite a later holder's work; beside
 * the token they store which etcd it came from (its etcd id), and refuse a token of another. The
 * adapters take your own `pg` and `ioredis` clients: neither is a dependency of this package.
 *
 * @packageDocumentation
 */
export { PostgresFence, type PostgresFenceOptions, type PgPool, type PgQueryable } from './postgres.js';
export { RedisFence, type RedisFenceOptions, type IoRedisLike, type NodeRedisLike } from './redis.js';
export {
  StaleTokenError,
  ForeignTokenError,
  FenceNotInstalledError,
  FenceUnavailableError,
  FenceTransactionError,
  UntrustedFenceTableError,
} from './errors.js';
export { ETCD_ID_KEY } from './etcd-id.js';
export type { FencingHandle, HeldFencingHandle, LeaderFencingHandle } from './handle.js';
