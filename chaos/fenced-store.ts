// The protected resource of the fenced workloads, hosted in the chaos parent and reached by workers
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

  private apply(worker: string, op: 'read' | 'write', token: bigint, value: number, at: number, opId?: string, careful?: boolean): StoreEntry {
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

/** A set of named registers. */
export class FencedStore {
  private readonly registers = new Map<string, FencedRegister>();

  register(name: string): FencedRegister {
    let r = this.registers.get(name);
    if (!r) this.registers.set(name, (r = new FencedRegister(name)));
    return r;
  }

  get all(): FencedRegister[] {
    return [...this.registers.values()];
  }
}
