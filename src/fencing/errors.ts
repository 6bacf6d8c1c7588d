import { EtcdError } from '../client/errors.js';

/**
 * The fenced resource refused a write: it has already stored a higher fencing token than the one
 * offered, so a later holder has written since. The offering holder lost its lock or leadership
 * (paused, cut off or slower than its TTL) and must stop: nothing of the refused write was applied.
 * `code` is `'ERR_STALE_TOKEN'`.
 */
export class StaleTokenError extends EtcdError {
  static override readonly code: string = 'ERR_STALE_TOKEN';

  constructor(
    /** The fenced resource: the PostgreSQL fence row's name, or the Redis key. */
    readonly resource: string,
    /** The token the refused write offered (`handle.fencingToken`). */
    readonly offeredToken: bigint,
    /** The highest token the resource had stored, greater than `offeredToken`. */
    readonly highestToken: bigint,
  ) {
    super(
      `stale fencing token for "${resource}": this write offered token ${offeredToken}, but a later holder already wrote with ` +
        `${highestToken}; nothing was written. This holder lost its lock or leadership (paused or cut off past its TTL): ` +
        'stop the work, and acquire again before writing',
    );
  }
}

/**
 * The PostgreSQL fence table does not exist: call `install()` once (or create it with your
 * migrations, see PostgresFence.install). `code` is `'ERR_FENCE_NOT_INSTALLED'`.
 */
export class FenceNotInstalledError extends EtcdError {
  static override readonly code: string = 'ERR_FENCE_NOT_INSTALLED';

  constructor(
    /** The fence table's name, as given to the PostgresFence. */
    readonly table: string,
    options?: { cause?: unknown },
  ) {
    super(`the fence table ${table} does not exist: call install() once on the PostgresFence (it creates the table), then retry`, options);
  }
}

/**
 * The fence could not reach its database: the pool or client is closed, or the server is
 * unreachable. The cause is the driver's error. Nothing was written. `code` is
 * `'ERR_FENCE_UNAVAILABLE'`.
 */
export class FenceUnavailableError extends EtcdError {
  static override readonly code: string = 'ERR_FENCE_UNAVAILABLE';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
