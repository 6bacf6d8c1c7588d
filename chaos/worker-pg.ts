// A fenced worker's PostgreSQL ledger (worker.ts, fenced role): a pool of its own, the fence, and
// this phase's rows; the same increment as the in-process ledger's, through PostgresFence, with an
// unfenced shadow register beside it (pg-ledger.ts judges both).
import pg from 'pg';
import { OwnershipLostError, type LockHandle } from '../src/index.js';
import { PostgresFence, StaleTokenError, type FencingHandle } from '../src/fencing/index.js';
import { now, type WorkerEvent } from './common.js';
import { PG_FENCE_TABLE } from './pg-ledger.js';

type PgOutcome = 'committed' | 'refused' | 'failed';
function pgOutcome(err: unknown): PgOutcome {
  return err instanceof StaleTokenError || err instanceof OwnershipLostError ? 'refused' : 'failed';
}

/** What read() found: the ledger's value, or why there is none. */
export type PgRead = { value: number } | { outcome: PgOutcome; error?: string };

/**
 * What a holder hands PostgresFence: a careful one its handle (checked before the transaction and
 * just before COMMIT); a plain one only its token, as a client that does not check would, so that
 * the database alone refuses it when stale.
 */
function fencingOf(handle: LockHandle, careful: boolean): FencingHandle {
  return careful ? handle : { fencingToken: handle.fencingToken, assertHeld: (): void => {}, session: handle.session };
}

export class PgLedger {
  private readonly pool: pg.Pool;
  private readonly fence: PostgresFence;

  constructor(
    private readonly pgc: { url: string; phase: string },
    private readonly emit: (e: WorkerEvent) => void,
  ) {
    this.pool = new pg.Pool({ connectionString: pgc.url, max: 2, connectionTimeoutMillis: 5000 });
    this.pool.on('error', () => {}); // a connection broken while idle: the next query reports it
    this.fence = new PostgresFence(this.pool, { table: PG_FENCE_TABLE });
  }

  /** The unfenced shadow's value, read at the start of a hold and written back plus one at its end. */
  async shadowRead(): Promise<number | undefined> {
    try {
      const r = await this.pool.query('SELECT value FROM chaos_shadow WHERE phase = $1', [this.pgc.phase]);
      return Number((r.rows[0] as { value: string } | undefined)?.value ?? 0);
    } catch {
      return undefined;
    }
  }

  /**
   * The ledger's value, read in a transaction fenced by our token (reads are fenced too: once a
   * newer holder has read, an older one's write is refused, as in the in-process register).
   */
  async read(handle: LockHandle, careful: boolean): Promise<PgRead> {
    const phase = this.pgc.phase;
    try {
      return await this.fence.run(fencingOf(handle, careful), `ledger/${phase}`, async (tx) => {
        const r = await tx.query('SELECT value FROM chaos_ledger WHERE phase = $1', [phase]);
        return { value: Number((r.rows[0] as { value: string } | undefined)?.value ?? 0) };
      });
    } catch (err) {
      return { outcome: pgOutcome(err), error: `${(err as Error).name}: ${(err as Error).message}`.slice(0, 200) };
    }
  }

  /**
   * The same increment on PostgreSQL: the value read under the fence plus one, written with an ops
   * row in one transaction fenced by PostgresFence; then the unfenced shadow's, from the value read
   * at the start of the hold. A stale holder (frozen after its reads) is refused by the fence, and
   * its shadow write lands over newer ones; a fence that let it through would write a value twice
   * (pg-lost-update).
   */
  async increment(
    handle: LockHandle,
    token: bigint,
    read: PgRead,
    shadow: number | undefined,
    careful: boolean,
    opId: string,
  ): Promise<void> {
    const phase = this.pgc.phase;
    let outcome: PgOutcome = 'failed';
    let error: string | undefined;
    if ('value' in read) {
      const v = read.value + 1;
      try {
        await this.fence.run(fencingOf(handle, careful), `ledger/${phase}`, async (tx) => {
          await tx.query('INSERT INTO chaos_ledger (phase, value) VALUES ($1, $2) ON CONFLICT (phase) DO UPDATE SET value = $2', [
            phase,
            v,
          ]);
          await tx.query('INSERT INTO chaos_ops (op_id, phase, value, token) VALUES ($1, $2, $3, $4)', [opId, phase, v, token.toString()]);
        });
        outcome = 'committed';
      } catch (err) {
        outcome = pgOutcome(err);
        if (outcome === 'failed') error = `${(err as Error).name}: ${(err as Error).message}`.slice(0, 200);
      }
    } else {
      outcome = read.outcome;
      if (outcome === 'failed') error = read.error;
    }
    let shadowWritten = false;
    if (shadow !== undefined) {
      try {
        await this.pool.query('INSERT INTO chaos_shadow (phase, value) VALUES ($1, $2) ON CONFLICT (phase) DO UPDATE SET value = $2', [
          phase,
          shadow + 1,
        ]);
        shadowWritten = true;
      } catch {
        // not written: not counted
      }
    }
    this.emit({ t: 'pg-inc', token: token.toString(), opId, outcome, shadowWritten, error, at: now() });
  }

  async end(): Promise<void> {
    await this.pool.end().catch(() => {});
  }
}
