import { InvalidArgumentError } from '../client/errors.js';
import { etcdIdOf } from './etcd-id.js';
import {
  FenceNotInstalledError,
  FenceTransactionError,
  FenceUnavailableError,
  ForeignTokenError,
  StaleTokenError,
  UntrustedFenceTableError,
} from './errors.js';
import { fencedBy, type Fenced, type FencingHandle } from './handle.js';

/**
 * What the fence needs of a node-postgres (`pg`) connection: `query(text, values)`, and, when it has
 * it (pg 8.16 and later), `getTransactionStatus()`, with which the fence checks that its transaction
 * is its own from BEGIN to COMMIT.
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[]; command?: string }>;
  /** `'I'` idle, `'T'` in a transaction, `'E'` in a failed transaction (pg's, from PostgreSQL's ReadyForQuery). */
  getTransactionStatus?(): string | null;
}

/** A node-postgres `Pool` (typed by its shape: `pg` is not a dependency of this package). */
export interface PgPool<Tx extends PgQueryable = PgQueryable> {
  connect(): Promise<Tx & { release(err?: Error | boolean): void }>;
  // pg's callback form, never called: TypeScript infers `Tx` (pg's PoolClient) from the last overload.
  connect(callback: (err: Error | undefined, client: Tx | undefined, done: (release?: unknown) => void) => void): void;
  readonly totalCount: number;
}

/** Options of {@link PostgresFence}. */
export interface PostgresFenceOptions {
  /**
   * The fence table: `name` or `schema.name`, letters, digits and `_` (a letter or `_` first), at
   * most 63 characters each. Used exactly as written (quoted, so case-sensitive). Default
   * `etcd_concurrency_fence`, which lands in the first schema of the search path; name a schema
   * your application owns (`app.fences`), as `install()` refuses a table another role owns.
   */
  table?: string;
  /**
   * How long a fenced transaction may stall, idle between two statements or inside one, before
   * PostgreSQL ends it (`idle_in_transaction_session_timeout` and `statement_timeout`, set for that
   * transaction only). A holder frozen inside `run()` (a pause, a stopped process) holds the fence
   * row locked, and with it every later holder's fenced write, until PostgreSQL ends its
   * transaction: this bounds that wait. Default: the TTL of the handle's session, after which the
   * frozen holder has lost its lock anyway. Work inside `run()` must fit it: one statement longer
   * than this is cancelled (SQLSTATE 57014), and a pause longer than this between statements (an
   * awaited call elsewhere) ends the connection; both roll the transaction back. Raise it for long
   * statements, knowing that a successor may then wait that long; better, keep slow work outside
   * `run()`.
   */
  stallTimeoutMs?: number;
}

/** SQLSTATE undefined_table. */
const UNDEFINED_TABLE = '42P01';
/** SQLSTATE undefined_column: a table made by a version before the etcd_id column. */
const UNDEFINED_COLUMN = '42703';
/** SQLSTATE query_canceled: our statement_timeout ended a wait for the fence row. */
const QUERY_CANCELED = '57014';
/** SQLSTATE idle_in_transaction_session_timeout: PostgreSQL ended a stalled transaction's connection. */
const IDLE_TIMEOUT = '25P03';
/** The column the etcd id is stored in, beside the token (see etcd-id.ts). */
const ETCD_ID_COLUMN = 'etcd_id';
/** PostgreSQL's largest timeout setting, in ms (an int). */
const MAX_TIMEOUT_MS = 2_147_483_647;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Fencing in PostgreSQL: runs your transaction only while its fencing token is the highest the
 * resource has seen from its etcd, so a holder that lost its lock without knowing (paused, cut off
 * past its TTL) is refused by the database itself, whatever the timing.
 *
 * One row per resource in the fence table holds the highest token written with, and the etcd id of
 * the etcd it came from. `run()` opens a transaction bounded by `stallTimeoutMs`, inserts or
 * row-locks the resource's row, refuses with {@link StaleTokenError} when the stored token is higher
 * than the handle's, or with {@link ForeignTokenError} when it came from another etcd, stores the
 * handle's token, runs your `fn(tx)`, checks the handle still holds just before COMMIT, and rolls
 * back on any error. Fenced transactions on one resource serialise on that row lock, so a stale one
 * cannot slip in between a check and a write. An equal token is the same holder writing again, and
 * is allowed.
 *
 * Give it a `pg` `Pool` (each run takes a client and always releases it) or a connected `Client`
 * that no one else uses during `run()` (runs on it are queued one after another; another query sent
 * on it meanwhile would join the fenced transaction and be rolled back with it).
 *
 * @example
 * ```ts
 * const fence = new PostgresFence(pool, { table: 'app.fences' });
 * await fence.install();
 * await fence.run(lock, 'accounts/7', (tx) => tx.query('UPDATE accounts SET balance = $1 WHERE id = 7', [balance]));
 * ```
 */
export class PostgresFence<Tx extends PgQueryable = PgQueryable> {
  /** The table name as SQL: each part quoted. */
  private readonly sql: string;
  private readonly table: string;
  private readonly stallTimeoutMs: number | undefined;
  private readonly pool: PgPool<Tx> | undefined;
  private readonly client: Tx | undefined;
  /** Runs on a single Client, chained: the next starts when the previous settled. */
  private queue: Promise<unknown> = Promise.resolve();

  /** A fence on a `pg` Pool: each run takes a client of the pool, and `fn` gets it as `tx`. */
  constructor(pool: PgPool<Tx>, options?: PostgresFenceOptions);
  /** A fence on a connected `pg` Client that no one else uses during `run()`: runs are queued on it, and `fn` gets it as `tx`. */
  constructor(client: Tx, options?: PostgresFenceOptions);
  constructor(db: PgPool<Tx> | Tx, options: PostgresFenceOptions = {}) {
    const table = options.table ?? 'etcd_concurrency_fence';
    const parts = typeof table === 'string' ? table.split('.') : [];
    if (parts.length < 1 || parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
      throw new InvalidArgumentError(
        `PostgresFence: table must be "name" or "schema.name" with letters, digits and _ (a letter or _ first, at most 63 each), got ${JSON.stringify(String(table)).slice(0, 80)}`,
      );
    }
    this.table = table;
    this.sql = parts.map((p) => `"${p}"`).join('.');
    const stall = options.stallTimeoutMs;
    if (stall !== undefined && (!Number.isInteger(stall) || stall < 1 || stall > MAX_TIMEOUT_MS)) {
      throw new InvalidArgumentError(
        `PostgresFence: stallTimeoutMs must be a whole number of milliseconds from 1 to 2147483647 (PostgreSQL's limit), got ${stall}; leave it out for the session's TTL`,
      );
    }
    this.stallTimeoutMs = stall;
    if (typeof db !== 'object' || db === null || typeof (db as Partial<PgQueryable>).query !== 'function') {
      throw new InvalidArgumentError('PostgresFence: give it a node-postgres Pool or a connected Client (an object with query())');
    }
    if (typeof (db as Partial<PgPool>).totalCount === 'number' && typeof (db as Partial<PgPool>).connect === 'function')
      this.pool = db as PgPool<Tx>;
    else this.client = db as Tx;
  }

  /**
   * Creates the fence table if it is missing (`CREATE TABLE IF NOT EXISTS`): `resource text primary
   * key, token bigint not null, etcd_id text`; adds the `etcd_id` column to a table an earlier
   * version made (its rows keep working: see the README, "When etcd is replaced"). Safe to call on
   * every start. Throws {@link UntrustedFenceTableError}, changing nothing, when the table belongs to
   * a role that is not you nor one you are a member of, a superuser or the owner of its schema:
   * another role could have created it first to change its tokens. To create the table in your
   * migrations instead, use the same three columns.
   */
  async install(): Promise<void> {
    await this.withConnection(async (db) => {
      await db.query(
        `CREATE TABLE IF NOT EXISTS ${this.sql} (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0), ${ETCD_ID_COLUMN} text)`,
      );
      const r = await db.query(
        'SELECT c.oid::regclass::text AS name, pg_get_userbyid(c.relowner) AS owner, current_user AS me, ' +
          "(pg_has_role(current_user, c.relowner, 'MEMBER') OR o.rolsuper OR c.relowner = n.nspowner) AS trusted, " +
          'EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped) AS has_etcd_id ' +
          'FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_roles o ON o.oid = c.relowner WHERE c.oid = to_regclass($1)',
        [this.sql, ETCD_ID_COLUMN],
      );
      const t = r.rows[0] as { name: string; owner: string; me: string; trusted: boolean; has_etcd_id: boolean };
      if (!t.trusted) throw new UntrustedFenceTableError(t.name, t.owner, t.me);
      // Only when missing: ALTER TABLE waits for every fenced transaction on the table, even with IF NOT EXISTS.
      if (!t.has_etcd_id) await db.query(`ALTER TABLE ${this.sql} ADD COLUMN IF NOT EXISTS ${ETCD_ID_COLUMN} text`);
    });
  }

  /**
   * The highest token stored for `resource`, or undefined when no fenced write was made to it.
   * For checks and tests: a decision taken on it would race, which is what run() is for.
   */
  async highestToken(resource: string): Promise<bigint | undefined> {
    checkResource(resource);
    const r = await this.withConnection((db) => this.guard(db.query(`SELECT token FROM ${this.sql} WHERE resource = $1`, [resource])));
    const row = r.rows[0] as { token: string | number | bigint } | undefined;
    return row === undefined ? undefined : BigInt(row.token);
  }

  /**
   * Runs `fn(tx)` in one transaction fenced by `handle`'s token on `resource` (any name you choose
   * for what the lock protects, e.g. `accounts/7`), and returns what `fn` returns once committed.
   * Throws {@link StaleTokenError} (and runs nothing) when a higher token was stored for `resource`;
   * {@link ForeignTokenError} (and runs nothing) when the stored token came from another etcd;
   * whatever `fn` or the commit throws after a rollback; the handle's loss error when it no longer
   * holds just before COMMIT (rolled back); {@link FenceTransactionError} when the transaction was
   * not the fence's own from BEGIN to COMMIT. Every query of `fn` must go through `tx`.
   *
   * While another fenced transaction holds the resource's row (a holder frozen inside `run()`
   * holds it until PostgreSQL ends its transaction, after its `stallTimeoutMs`), this one waits for
   * the row as long as `handle` holds, asking again each `stallTimeoutMs`; to stop waiting, release
   * the lock. The first fenced write of a session also reads the etcd id from etcd (see
   * `ETCD_ID_KEY`).
   */
  async run<T>(handle: FencingHandle, resource: string, fn: (tx: Tx) => Promise<T> | T): Promise<T> {
    const fenced = fencedBy(handle, 'PostgresFence.run');
    checkResource(resource);
    if (typeof fn !== 'function')
      throw new InvalidArgumentError('PostgresFence.run: fn must be a function (tx) => ... that runs the fenced queries on tx');
    fenced.assert(); // a holder already known lost needs no round trip to be refused
    const write: FencedWrite<T, Tx> = {
      fenced,
      resource,
      etcdId: await etcdIdOf(fenced.session),
      stallMs: this.stallTimeoutMs ?? Math.min(fenced.session.ttl * 1000, MAX_TIMEOUT_MS),
      fn,
    };
    return this.withConnection(async (tx, conn) => {
      for (;;) {
        const done = await this.attempt(tx, conn, write);
        if (done) return done.result;
        fenced.assert(); // waited a whole stallTimeoutMs for the row: wait on only while the handle holds
      }
    });
  }

  /** One fenced transaction; undefined when the fence row stayed locked for the whole bound (rolled back: try again). */
  private async attempt<T>(tx: Tx, conn: ConnectionState, w: FencedWrite<T, Tx>): Promise<{ result: T } | undefined> {
    const { fenced, resource } = w;
    if (!transactionIs(tx, 'I')) {
      throw new FenceTransactionError(
        'PostgresFence.run: a transaction is already open on this Client, so other code is using it: the fenced transaction would ' +
          'join it; nothing was run. Give the fence a Pool, or a Client no one else uses during run()',
      );
    }
    conn.inTransaction = true;
    try {
      // One round trip: the bounds hold for this transaction only (SET LOCAL).
      await tx.query(`BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${w.stallMs}; SET LOCAL statement_timeout = ${w.stallMs}`);
      // Insert the row, or lock the existing one and store our token and etcd id when the token is
      // not lower and the etcd the same (or not yet known: a row of an earlier version). The
      // conflicting row is locked even when the WHERE leaves it unchanged, so what is read next
      // stays until we end.
      let up: { rows: unknown[] };
      try {
        up = await this.guard(
          tx.query(
            `INSERT INTO ${this.sql} AS f (resource, token, ${ETCD_ID_COLUMN}) VALUES ($1, $2, $3) ON CONFLICT (resource) DO UPDATE ` +
              `SET token = EXCLUDED.token, ${ETCD_ID_COLUMN} = EXCLUDED.${ETCD_ID_COLUMN} WHERE f.token <= EXCLUDED.token ` +
              `AND (f.${ETCD_ID_COLUMN} IS NULL OR f.${ETCD_ID_COLUMN} = EXCLUDED.${ETCD_ID_COLUMN}) RETURNING f.token`,
            [resource, String(fenced.token), w.etcdId],
          ),
        );
      } catch (err) {
        if (sqlState(err) !== QUERY_CANCELED) throw err;
        await tx.query('ROLLBACK');
        conn.inTransaction = false;
        return undefined;
      }
      if (up.rows.length === 0) throw await this.refusal(tx, w);
      const result = await w.fn(tx);
      fenced.assert();
      if (!transactionIs(tx, 'T')) throw notOwnTransaction(tx.getTransactionStatus?.() === 'E');
      // PostgreSQL answers COMMIT of a failed transaction with ROLLBACK, and no error.
      const committed = await tx.query('COMMIT');
      if (committed.command === 'ROLLBACK') throw notOwnTransaction(true);
      return { result };
    } catch (err) {
      // A failed ROLLBACK means a broken connection (the server ends the transaction with it):
      // the pool must not hand that client out again.
      await tx.query('ROLLBACK').catch((e: unknown) => (conn.broken ??= e instanceof Error ? e : new Error(String(e))));
      if (sqlState(conn.broken) === IDLE_TIMEOUT) {
        throw new FenceTransactionError(
          `PostgresFence.run: the fenced transaction on "${resource}" stalled longer than stallTimeoutMs (${w.stallMs} ms) between two ` +
            'statements, and PostgreSQL ended it with its connection; nothing was written. Keep slow work outside run(), or raise stallTimeoutMs',
          { cause: conn.broken },
        );
      }
      throw err;
    }
  }

  /** Why the fence row refused our token, read in our transaction (the row stays locked). */
  private async refusal(tx: Tx, w: FencedWrite<unknown, Tx>): Promise<Error> {
    const r = await tx.query(`SELECT token, ${ETCD_ID_COLUMN} AS etcd_id FROM ${this.sql} WHERE resource = $1`, [w.resource]);
    const row = r.rows[0] as { token: string; etcd_id: string | null };
    w.fenced.refused('postgres');
    if (row.etcd_id !== null && row.etcd_id !== w.etcdId) {
      const reset = `DELETE FROM ${this.sql} WHERE resource = '${w.resource.replaceAll("'", "''")}'`;
      return new ForeignTokenError(w.resource, w.fenced.token, w.etcdId, BigInt(row.token), row.etcd_id, reset);
    }
    return new StaleTokenError(w.resource, w.fenced.token, BigInt(row.token));
  }

  /**
   * Runs `use` on a client of the pool (always released; destroyed when the run may have broken it),
   * or on the Client, after the runs before it.
   */
  private async withConnection<T>(use: (db: Tx, conn: ConnectionState) => Promise<T>): Promise<T> {
    if (this.client) {
      const client = this.client;
      const run = this.queue.then(() => this.listening(client, (conn) => use(client, conn)));
      this.queue = run.catch(() => {});
      return run;
    }
    let client: Tx & { release(err?: Error | boolean): void };
    try {
      client = await this.pool!.connect();
    } catch (cause) {
      throw new FenceUnavailableError(
        'PostgresFence: could not get a connection from the pool (was it ended with end()? is the server reachable?); nothing was written',
        { cause },
      );
    }
    let broken: Error | undefined;
    try {
      return await this.listening(client, async (conn) => {
        try {
          return await use(client, conn);
        } catch (err) {
          // Outside a transaction, only an SQL error (or ours) proves the connection still answers.
          if (!conn.inTransaction && !conn.broken && !(err instanceof FenceNotInstalledError || hasSqlState(err))) {
            conn.broken = err instanceof Error ? err : new Error(String(err));
          }
          throw err;
        } finally {
          broken = conn.broken;
        }
      });
    } finally {
      client.release(broken);
    }
  }

  /**
   * Runs `use` with an ear on `db`'s 'error' event: a connection that breaks while we use it (or that
   * PostgreSQL ends, after a stall) emits it, which pg leaves to the user: unheard, it would crash the
   * process. The failed query reports it; a pool's client is then destroyed.
   */
  private async listening<T>(db: Tx, use: (conn: ConnectionState) => Promise<T>): Promise<T> {
    const conn: ConnectionState = { inTransaction: false };
    const events = db as unknown as Partial<Pick<NodeJS.EventEmitter, 'on' | 'removeListener'>>;
    const onError = (err: unknown): void => {
      conn.broken ??= err instanceof Error ? err : new Error(String(err));
    };
    events.on?.('error', onError);
    try {
      return await use(conn);
    } finally {
      events.removeListener?.('error', onError);
    }
  }

  /** Maps "the fence table (or its etcd_id column) does not exist" (only for our own statements) to FenceNotInstalledError. */
  private async guard<R>(q: Promise<R>): Promise<R> {
    try {
      return await q;
    } catch (err) {
      const state = sqlState(err);
      if (state === UNDEFINED_TABLE) throw new FenceNotInstalledError(this.table, { cause: err });
      if (state === UNDEFINED_COLUMN) throw new FenceNotInstalledError(this.table, { cause: err, column: ETCD_ID_COLUMN });
      throw err;
    }
  }
}

/** One fenced write, as run() hands it to each attempt. */
interface FencedWrite<T, Tx> {
  readonly fenced: Fenced;
  readonly resource: string;
  /** The etcd id of the etcd the handle's token came from. */
  readonly etcdId: string;
  /** stallTimeoutMs, or the session's TTL. */
  readonly stallMs: number;
  readonly fn: (tx: Tx) => Promise<T> | T;
}

/** What a run learnt about its connection. */
interface ConnectionState {
  /** BEGIN was sent: the run's own ROLLBACK tells whether the connection survived. */
  inTransaction: boolean;
  /** Why the connection must not be reused. */
  broken?: Error;
}

/** Whether `db`'s transaction status is `status`; true when the driver does not tell (pg before 8.16, or another driver). */
function transactionIs(db: PgQueryable, status: 'I' | 'T'): boolean {
  const s = db.getTransactionStatus?.();
  return s === undefined || s === null || s === status;
}

/** The transaction was not ours up to COMMIT: it `failed` (a statement's error was caught), or was ended midway. */
function notOwnTransaction(failed: boolean): FenceTransactionError {
  return new FenceTransactionError(
    failed
      ? 'PostgresFence.run: a statement of the fenced transaction failed and its error was caught inside fn, so PostgreSQL commits ' +
          'nothing of it: nothing was written. Let the error out of fn (or use a SAVEPOINT to go on after it)'
      : 'PostgresFence.run: the fenced transaction was ended before the fence could commit it: a COMMIT or ROLLBACK inside fn, or ' +
          'other code on the same Client. What ran after that ran on its own, unfenced. Give the fence a Pool, or a Client no one ' +
          'else uses during run(), and leave COMMIT to the fence',
  );
}

/** The SQLSTATE of a PostgreSQL error, if `err` is one. */
function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A server-side SQL error (it has a five-character SQLSTATE): the connection is still fine. */
function hasSqlState(err: unknown): boolean {
  const code = sqlState(err);
  return code !== undefined && /^[0-9A-Z]{5}$/.test(code) && !code.startsWith('08') && !code.startsWith('57');
}

function checkResource(resource: unknown): asserts resource is string {
  if (typeof resource !== 'string' || resource.length === 0) {
    throw new InvalidArgumentError('PostgresFence: resource must be a non-empty string naming what the lock protects (e.g. "accounts/7")');
  }
}
