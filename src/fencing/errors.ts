import { EtcdError } from '../client/errors.js';

/**
 * Gives an error its stable string `code`. EtcdError types `code` as a gRPC status number, which a
 * subclass cannot narrow to a string: it is set at run time here, and each class names it as a
 * typed static `CODE` to compare with (`err.code === StaleTokenError.CODE`).
 */
function setCode(err: Error, code: string): void {
  Object.defineProperty(err, 'code', { value: code, enumerable: true, writable: false, configurable: true });
}

/**
 * The fenced resource refused a write: it has already stored a higher fencing token than the one
 * offered, so a later holder has written since. The offering holder lost its lock or leadership
 * (paused, cut off or slower than its TTL) and must stop: nothing of the refused write was applied.
 * `code` is `'ERR_STALE_TOKEN'`.
 */
export class StaleTokenError extends EtcdError {
  /** The stable `code` of this error. */
  static readonly CODE = 'ERR_STALE_TOKEN';

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
    setCode(this, StaleTokenError.CODE);
  }
}

/**
 * The PostgreSQL fence table does not exist: call `install()` once (or create it with your
 * migrations, see PostgresFence.install). `code` is `'ERR_FENCE_NOT_INSTALLED'`.
 */
export class FenceNotInstalledError extends EtcdError {
  /** The stable `code` of this error. */
  static readonly CODE = 'ERR_FENCE_NOT_INSTALLED';

  constructor(
    /** The fence table's name, as given to the PostgresFence. */
    readonly table: string,
    options?: { cause?: unknown },
  ) {
    super(`the fence table ${table} does not exist: call install() once on the PostgresFence (it creates the table), then retry`, options);
    setCode(this, FenceNotInstalledError.CODE);
  }
}

/**
 * The fence could not reach its database: the pool or client is closed, or the server is
 * unreachable. The cause is the driver's error. Nothing was written. `code` is
 * `'ERR_FENCE_UNAVAILABLE'`.
 */
export class FenceUnavailableError extends EtcdError {
  /** The stable `code` of this error. */
  static readonly CODE = 'ERR_FENCE_UNAVAILABLE';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    setCode(this, FenceUnavailableError.CODE);
  }
}
