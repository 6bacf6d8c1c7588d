// The calls of a differential run, as plain data: one seed gives one sequence, the same on every
// side, before anything runs. What depends on the answers (the current revision, the ids etcd chose
// for leases, the revisions of a key) is named here by reference and resolved by the runner from
// the answers of the side it runs on (see run.ts), so two sides that agree resolve alike.

/** A key under the run's root (ROOT + this), from the small universe below. */
export type Key = string;

/**
 * A revision: 0, or one named by what it is relative to: the store's revision as last seen
 * (`current - minus`, at least 1), past it (`current + plus`), the last compaction
 * (`compacted - minus`, at least 1), or the create or mod revision last seen for a key (0 when
 * never seen).
 */
export type RevRef =
  | 0
  | { at: 'current'; minus: number }
  | { at: 'future'; plus: number }
  | { at: 'compacted'; minus: number }
  | { at: 'seen'; key: Key; field: 'create' | 'mod' };

/**
 * A lease: none (0), one never granted, or the n-th granted so far (counted modulo the number of
 * grants; with none granted yet, one never granted).
 */
export type LeaseRef = 'none' | 'unknown' | { grant: number };

export interface RangeSpec {
  key: Key;
  /** No end: the one key; 'prefix': every key starting with `key`; a key: up to it, excluded. */
  end?: 'prefix' | Key;
  limit?: number;
  /** 0 none, 1 ascend, 2 descend (etcd's SortOrder). */
  sortOrder?: 0 | 1 | 2;
  /** 0 key, 1 version, 2 create, 3 mod, 4 value (etcd's SortTarget). */
  sortTarget?: 0 | 1 | 2 | 3 | 4;
  countOnly?: boolean;
  keysOnly?: boolean;
  minCreate?: RevRef;
  maxCreate?: RevRef;
  minMod?: RevRef;
  maxMod?: RevRef;
  revision?: RevRef;
  serializable?: boolean;
}

export interface CompareSpec {
  key: Key;
  target: 'create' | 'mod' | 'version' | 'value' | 'lease';
  result: '=' | '!=' | '<' | '>';
  rev?: RevRef;
  version?: number;
  value?: string;
  lease?: LeaseRef;
}

export interface PutSpec {
  key: Key;
  value: string;
  lease: LeaseRef;
  prevKv?: boolean;
  ignoreValue?: boolean;
  ignoreLease?: boolean;
}

export interface DeleteSpec {
  key: Key;
  end?: 'prefix' | Key;
  prevKv?: boolean;
}

export type OpSpec = { put: PutSpec } | { range: RangeSpec } | { delete: DeleteSpec } | { txn: TxnSpec };

export interface TxnSpec {
  compares: CompareSpec[];
  success: OpSpec[];
  failure: OpSpec[];
}

export interface WatchSpec {
  key: Key;
  prefix: boolean;
  /** Omitted: from now. */
  start?: RevRef;
  prevKv: boolean;
  noPut: boolean;
  noDelete: boolean;
}

/** One call of the sequence, and which Client method makes it (see run.ts). */
export type Step =
  | { kind: 'put'; key: Key; value: string; lease: LeaseRef }
  | { kind: 'get'; key: Key; revision?: RevRef }
  | { kind: 'getPrefix'; prefix: Key; revision?: RevRef; limit?: number }
  | { kind: 'range'; range: RangeSpec }
  | { kind: 'delete'; key: Key; prefix: boolean }
  | { kind: 'txn'; txn: TxnSpec }
  /** A Txn of `compares` compares and `ops` reads of one key, or one nested Txn of `ops` reads: around --max-txn-ops. */
  | { kind: 'bigTxn'; compares: number; ops: number; nested: boolean }
  /** `id`: a lease id the client chooses (possibly one already granted). */
  | { kind: 'leaseGrant'; ttl: number; id?: number }
  | { kind: 'leaseRevoke'; lease: LeaseRef }
  /** One renewal on a stream of its own (Client.leaseKeepAliveOnce). */
  | { kind: 'keepAliveOnce'; lease: LeaseRef }
  /** One renewal on the client's shared keep-alive stream (what a Session uses). */
  | { kind: 'keepAlive'; lease: LeaseRef }
  | { kind: 'timeToLive'; lease: LeaseRef; keys: boolean }
  | { kind: 'leases' }
  | { kind: 'compact'; revision: RevRef; physical: boolean }
  | { kind: 'watch'; watch: WatchSpec }
  /** Cancels the n-th watch created (modulo how many there are); none yet: nothing. */
  | { kind: 'cancel'; watch: number }
  | { kind: 'status' };

export type StepKind = Step['kind'];
