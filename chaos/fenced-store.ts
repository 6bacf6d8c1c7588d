// The protected resources of the fenced workloads, hosted in the chaos parent and reached by workers
// through their stdio (a "network" that a paused worker delays, exactly like a slow packet).
//
// Each register keeps the highest fencing token it has seen, on reads and on writes, and refuses
// any request with a lower one. That is the whole of fencing: a holder that lost its lock during a
// pause and wakes up later carries an older token than whoever took over, and is refused.

/** One request the store answered, in the order it answered them. */
export interface StoreEntry {
  seq: number;
  at: number;
  worker: string;
  op: 'read' | 'write';
  token: bigint;
  /** Refused: the token was older than the highest seen. */
  ok: boolean;
  /** For reads, the value returned; for writes, the value written (if accepted) or attempted. */
  value: number;
  /** The register's value just before this request. */
  before: number;
  /** The highest token seen before this request. */
  highestBefore: bigint;
  opId?: string;
  /** The writer called assertHeld() just before sending. */
  careful?: boolean;
}

export class FencedRegister {
  highest = -1n;
  value = 0;
  readonly log: StoreEntry[] = [];
  private seq = 0;

  constructor(readonly name: string) {}

  read(worker: string, token: bigint, at: number): StoreEntry {
    return this.apply(worker, 'read', token, this.value, at);
  }

  write(worker: string, token: bigint, value: number, at: number, opId?: string, careful?: boolean): StoreEntry {
    return this.apply(worker, 'write', token, value, at, opId, careful);
  }

  private apply(
    worker: string,
    op: 'read' | 'write',
    token: bigint,
    value: number,
    at: number,
    opId?: string,
    careful?: boolean,
  ): StoreEntry {
    const entry: StoreEntry = {
      seq: this.seq++,
      at,
      worker,
      op,
      token,
      ok: token >= this.highest,
      value: op === 'read' ? this.value : value,
      before: this.value,
      highestBefore: this.highest,
    };
    if (opId !== undefined) entry.opId = opId;
    if (careful !== undefined) entry.careful = careful;
    if (entry.ok) {
      this.highest = token;
      if (op === 'write') this.value = value;
    }
    this.log.push(entry);
    return entry;
  }
}

/** A set of named registers, plus the semaphore's and the RW lock's resources. */
export class FencedStore {
  private readonly registers = new Map<string, FencedRegister>();
  readonly permits: FencedPermits;
  readonly rw = new FencedRW('rw');

  constructor(options: { permits: number } = { permits: 1 }) {
    this.permits = new FencedPermits('permits', options.permits);
  }

  register(name: string): FencedRegister {
    let r = this.registers.get(name);
    if (!r) this.registers.set(name, (r = new FencedRegister(name)));
    return r;
  }

  get all(): FencedRegister[] {
    return [...this.registers.values()];
  }
}

// ------------------------------------------------------------------ the semaphore's resource

/** One request the permits resource answered. */
export interface PermitEntry {
  seq: number;
  at: number;
  worker: string;
  op: 'enter' | 'write' | 'leave';
  token: bigint;
  /** enter: admitted; write: accepted (the token was still admitted); leave: it was admitted until now. */
  ok: boolean;
  /** Tokens this request pushed out (enter only): the lowest, when more than `capacity` were admitted. */
  evicted?: bigint[];
  /** The number of accepted writes after this request. */
  value: number;
  opId?: string;
  /** The holder called assertHeld() just before sending. */
  careful?: boolean;
}

/**
 * The protected resource of the semaphore workload: it serves at most `capacity` holders at once,
 * told apart by fencing token. A holder enters (admitted), writes (accepted only while still
 * admitted) and leaves, and it leaves *before* releasing its permit in etcd, so the admitted set
 * never lags behind etcd for a live holder.
 *
 * Permits go in token order: a key holds only while fewer than `capacity` keys older than it
 * exist. So when a new holder enters and more than `capacity` tokens are admitted, one of them
 * stopped holding without leaving (frozen or killed past its TTL): the resource keeps the
 * `capacity` highest and pushes out the lowest, as the fenced register keeps only the highest
 * token. An evicted (or departed) token is refused from then on. A live holder that passed
 * assertHeld() is never pushed out unless more than `capacity` held at once.
 */
export class FencedPermits {
  /** Admitted, not yet left nor evicted. */
  readonly admitted = new Set<bigint>();
  /** Left or evicted: refused from now on. */
  private readonly gone = new Set<bigint>();
  value = 0;
  readonly log: PermitEntry[] = [];
  private seq = 0;

  constructor(
    readonly name: string,
    readonly capacity: number,
  ) {}

  enter(worker: string, token: bigint, at: number): PermitEntry {
    const entry = this.entry(worker, 'enter', token, at);
    if (!this.gone.has(token)) {
      this.admitted.add(token);
      if (this.admitted.size > this.capacity) {
        const sorted = [...this.admitted].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        entry.evicted = sorted.slice(0, sorted.length - this.capacity);
        for (const t of entry.evicted) {
          this.admitted.delete(t);
          this.gone.add(t);
        }
      }
      entry.ok = this.admitted.has(token);
    }
    return this.push(entry);
  }

  write(worker: string, token: bigint, at: number, opId?: string, careful?: boolean): PermitEntry {
    const entry = this.entry(worker, 'write', token, at);
    if (opId !== undefined) entry.opId = opId;
    if (careful !== undefined) entry.careful = careful;
    entry.ok = this.admitted.has(token);
    if (entry.ok) entry.value = ++this.value;
    return this.push(entry);
  }

  leave(worker: string, token: bigint, at: number): PermitEntry {
    const entry = this.entry(worker, 'leave', token, at);
    entry.ok = this.admitted.delete(token);
    this.gone.add(token);
    return this.push(entry);
  }

  private entry(worker: string, op: PermitEntry['op'], token: bigint, at: number): PermitEntry {
    return { seq: this.seq++, at, worker, op, token, ok: false, value: this.value };
  }

  private push(entry: PermitEntry): PermitEntry {
    entry.value = this.value;
    this.log.push(entry);
    return entry;
  }
}

// ------------------------------------------------------------------ the RW lock's resource

/** One request the RW resource answered. */
export interface RWEntry {
  seq: number;
  at: number;
  worker: string;
  /** enter: the holder's first request (a read of the value); then a read (readers) or a write (writers). */
  op: 'enter' | 'read' | 'write';
  /** The mode the holder holds the lock in. */
  mode: 'read' | 'write';
  token: bigint;
  ok: boolean;
  /** Reads: the value returned; writes: the value written (if accepted) or attempted. */
  value: number;
  /** The value just before this request. */
  before: number;
  /** The highest token of any holder, and of a writer, seen before this request. */
  highestBefore: bigint;
  highestWriteBefore: bigint;
  opId?: string;
  careful?: boolean;
}

/**
 * The protected resource of the RW lock workload: a counter that writers increment (read, then
 * write the value plus one) and readers read twice, every request carrying the holder's token and
 * mode. Two watermarks, in the spirit of the fenced register:
 * - a writer's request is refused if any holder (reader or writer) with a higher token was seen: a
 *   writer holds only once every older key is gone, and a newer reader or writer held, so it is;
 * - a reader's request is refused if a writer with a higher token was seen: a newer writer held,
 *   so every older key, this reader's included, was gone. Older readers never refuse a reader.
 */
export class FencedRW {
  highest = -1n;
  highestWrite = -1n;
  value = 0;
  readonly log: RWEntry[] = [];
  private seq = 0;

  constructor(readonly name: string) {}

  request(
    worker: string,
    op: RWEntry['op'],
    mode: RWEntry['mode'],
    token: bigint,
    at: number,
    value?: number,
    opId?: string,
    careful?: boolean,
  ): RWEntry {
    const write = op === 'write';
    if (write && mode !== 'write') throw new Error(`${worker}: a write under a read lock`);
    const ok = mode === 'write' ? token >= this.highest : token >= this.highestWrite;
    const entry: RWEntry = {
      seq: this.seq++,
      at,
      worker,
      op,
      mode,
      token,
      ok,
      value: write ? (value ?? 0) : this.value,
      before: this.value,
      highestBefore: this.highest,
      highestWriteBefore: this.highestWrite,
    };
    if (opId !== undefined) entry.opId = opId;
    if (careful !== undefined) entry.careful = careful;
    if (ok) {
      if (token > this.highest) this.highest = token;
      if (mode === 'write' && token > this.highestWrite) this.highestWrite = token;
      if (write) this.value = entry.value;
    }
    this.log.push(entry);
    return entry;
  }
}
