// Card 8801's ledger in a real PostgreSQL, when one is installed on the machine: each charge is
// written through etcd-concurrency/fencing's PostgresFence, so it is the database itself that
// refuses the ghost's stale token. Without PostgreSQL (or the pg client) the demo keeps its
// in-memory ledger, which checks the tokens itself.
import type { Pool } from 'pg';
import type { Session } from '../../src/index.js';
import { PostgresFence, StaleTokenError } from '../../src/fencing/index.js';
import { findPostgres, startPostgres, type PostgresServer } from '../../src/testing/index.js';
import type { Job } from './protocol.js';

/** The fenced resource: one name for the card's ledger. */
const RESOURCE = 'card-8801';

export class PostgresLedger {
  private constructor(
    readonly server: PostgresServer,
    private readonly pool: Pool,
    private readonly fence: PostgresFence,
  ) {}

  /** A throwaway PostgreSQL with the ledger's table, or undefined when PostgreSQL or pg is missing. */
  static async start(): Promise<PostgresLedger | undefined> {
    if (!findPostgres()) return undefined;
    const pg = await import('pg').catch(() => undefined);
    if (!pg) return undefined;
    const server = await startPostgres();
    const pool = new pg.default.Pool({ connectionString: server.connectionString, max: 4 });
    // pg's advice: an idle client's error (the server stopping while its socket is still closing
    // after end()) is emitted on the pool, and would otherwise crash the process.
    pool.on('error', () => {});
    try {
      await pool.query(
        'CREATE TABLE charges (id bigserial PRIMARY KEY, job text NOT NULL, cents int NOT NULL, token bigint NOT NULL, by text NOT NULL)',
      );
      const fence = new PostgresFence(pool, { table: 'fences' });
      await fence.install();
      return new PostgresLedger(server, pool, fence);
    } catch (err) {
      await pool.end();
      await server.stop();
      throw err;
    }
  }

  /**
   * Writes a charge with `token` through the fence: refused when a higher token is stored. The
   * worker checked its own lock before asking (and is told of its loss on waking); the database
   * decides on the token alone, which is what fencing is for. `session` (the parent's, on the same
   * etcd as the workers') tells the fence which etcd the token came from.
   */
  async write(job: Job, token: bigint, by: string, session: Session): Promise<{ ok: true } | { ok: false; highest: bigint }> {
    try {
      await this.fence.run({ fencingToken: token, assertHeld() {}, session }, RESOURCE, (tx) =>
        tx.query('INSERT INTO charges (job, cents, token, by) VALUES ($1, $2, $3, $4)', [job.id, job.cents, String(token), by]),
      );
      return { ok: true };
    } catch (err) {
      if (err instanceof StaleTokenError) return { ok: false, highest: err.highestToken };
      throw err;
    }
  }

  /** The charges as the database holds them, in the order they were written: job and token. */
  async charges(): Promise<{ job: string; token: bigint }[]> {
    const r = await this.pool.query<{ job: string; token: string }>('SELECT job, token FROM charges ORDER BY id');
    return r.rows.map((row) => ({ job: row.job, token: BigInt(row.token) }));
  }

  async stop(): Promise<void> {
    await this.pool.end().catch(() => {});
    await this.server.stop();
  }
}
