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
 * The fenced resource refused a write: its fencing token comes from another etcd than the one the
 * resource was last written from, so the two tokens cannot be compared. Fencing tokens are etcd
 * revisions, and an etcd whose data is new (wiped, recreated, or restored from a snapshot taken
 * before its etcd id was made) counts them from 1 again; each etcd keeps a random id (its etcd id,
 * at the key `ETCD_ID_KEY`) that the fences store beside the token. Refused whether the token is
 * lower, equal or higher than the stored one; nothing was written. If etcd was replaced on purpose
 * and no holder of the old one can still write, reset the resource's fence (the message says how);
 * to restore etcd from a snapshot, use `etcdutl snapshot restore --bump-revision` (README, "When etcd
 * is replaced"). `code` is `'ERR_FOREIGN_TOKEN'`.
 */
export class ForeignTokenError extends EtcdError {
  static override readonly code: string = 'ERR_FOREIGN_TOKEN';

  constructor(
    /** The fenced resource: the PostgreSQL fence row's name, or the Redis key. */
    readonly resource: string,
    /** The token the refused write offered (`handle.fencingToken`). */
    readonly offeredToken: bigint,
    /** The etcd id of the etcd that token came from: the cluster id it was made on (hex), `-`, a random part. */
    readonly offeredEtcdId: string,
    /** The token the resource was last written with. */
    readonly storedToken: bigint,
    /** The etcd id of the etcd that stored token came from. */
    readonly storedEtcdId: string,
    /** How to reset the resource's fence: a command for the store. */
    reset: string,
  ) {
    super(
      `fencing token ${offeredToken} for "${resource}" comes from etcd ${offeredEtcdId}, but the resource was last written with token ` +
        `${storedToken} from etcd ${storedEtcdId}; nothing was written. An etcd whose data is new (wiped, recreated, or restored from a ` +
        'snapshot older than its etcd id) counts its tokens from 1 again, so tokens of two etcds cannot be compared. If etcd was replaced ' +
        `on purpose and no holder of the old one can still write, reset this resource's fence (${reset}) and write again; to restore etcd ` +
        'from a snapshot, use etcdutl snapshot restore --bump-revision, which keeps its tokens growing (README: "When etcd is replaced")',
    );
  }
}

/**
 * The PostgreSQL fence table does not exist, or lacks the `etcd_id` column (made by an earlier
 * version): call `install()` once (or create or alter it in your migrations, see
 * PostgresFence.install). `code` is `'ERR_FENCE_NOT_INSTALLED'`.
 */
export class FenceNotInstalledError extends EtcdError {
  static override readonly code: string = 'ERR_FENCE_NOT_INSTALLED';

  constructor(
    /** The fence table's name, as given to the PostgresFence. */
    readonly table: string,
    options?: { cause?: unknown; column?: string },
  ) {
    super(
      options?.column === undefined
        ? `the fence table ${table} does not exist: call install() once on the PostgresFence (it creates the table), then retry`
        : `the fence table ${table} has no column ${options.column} (an earlier version made it): call install() once on the ` +
            `PostgresFence (it adds the column; existing rows keep working), or ALTER TABLE ${table} ADD COLUMN ${options.column} text in your migrations`,
      options,
    );
  }
}

/**
 * `PostgresFence.install()` found the fence table owned by a role you cannot trust with it: not
 * you nor a role you are a member of, not a superuser, not the owner of its schema. Another role
 * may have created it first (before PostgreSQL 15 every role may create tables in the `public`
 * schema) and could then change its tokens. Nothing was changed. Use a table in a schema your
 * application owns (`table: 'app.fences'`). `code` is `'ERR_FENCE_TABLE_UNTRUSTED'`.
 */
export class UntrustedFenceTableError extends EtcdError {
  static override readonly code: string = 'ERR_FENCE_TABLE_UNTRUSTED';

  constructor(
    /** The fence table, as PostgreSQL names it (schema-qualified when not on the search path). */
    readonly table: string,
    /** The role that owns it. */
    readonly owner: string,
    /** The role the fence connects as. */
    readonly user: string,
  ) {
    super(
      `the fence table ${table} belongs to role "${owner}", which "${user}" is not a member of (nor is "${owner}" a superuser or the ` +
        "owner of the table's schema): another role may have created it first (before PostgreSQL 15 every role may create tables in " +
        'the public schema) and could change its tokens. Nothing was changed. Drop it if it is not yours, and give the fence a table in a ' +
        `schema your application owns (table: 'app.fences'), or grant "${user}" membership in "${owner}" if you trust that role`,
    );
  }
}

/**
 * A fenced transaction did not run from BEGIN to COMMIT as one transaction of its own, so the fence
 * cannot vouch for it: another transaction was already open on the `pg` Client (other code uses it),
 * a statement inside `fn` failed and its error was caught (PostgreSQL then commits nothing), the
 * transaction was ended midway (a COMMIT or ROLLBACK inside `fn`, or other code on the same Client:
 * statements after that ran on their own), or it stalled past `stallTimeoutMs` and PostgreSQL ended
 * it. The message says which. `code` is `'ERR_FENCE_TRANSACTION'`.
 */
export class FenceTransactionError extends EtcdError {
  static override readonly code: string = 'ERR_FENCE_TRANSACTION';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
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
