import * as pb from '../proto/etcd.js';

/** A key or value: strings are UTF-8. */
export type Bytes = string | Buffer | Uint8Array;

/** A stored key as etcd returns it; every int64 is a bigint. */
export type KeyValue = Required<Omit<pb.KeyValue, 'key' | 'value'>> & { key: Buffer; value: Buffer };

export interface ResponseHeader {
  clusterId: bigint;
  memberId: bigint;
  /** The store's revision when the request was served. */
  revision: bigint;
  raftTerm: bigint;
}

export type RangeRequest = pb.RangeRequest;
export type TxnRequest = pb.TxnRequest;
export type RequestOp = pb.RequestOp;
export type Compare = pb.Compare;
export const SortOrder = pb.RangeRequest_SortOrder;
export type SortOrder = pb.RangeRequest_SortOrder;
export const SortTarget = pb.RangeRequest_SortTarget;

export interface RangeResult {
  header: ResponseHeader;
  kvs: KeyValue[];
  more: boolean;
  count: bigint;
}

export interface TxnResult {
  header: ResponseHeader;
  succeeded: boolean;
  responses: pb.ResponseOp[];
}

export function toBuffer(b: Bytes): Buffer {
  if (typeof b === 'string') return Buffer.from(b, 'utf8');
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/** The range end that makes a range cover every key starting with `prefix` (etcd's GetPrefixRangeEnd). */
export function prefixEnd(prefix: Bytes): Buffer {
  const end = Buffer.from(toBuffer(prefix));
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]); // all keys
}

/** The key and range end covering every key that starts with `prefix`; the empty prefix means all keys. */
export function prefixRange(prefix: Bytes): { key: Buffer; rangeEnd: Buffer } {
  const key = toBuffer(prefix);
  if (key.length === 0) return { key: Buffer.from([0]), rangeEnd: Buffer.from([0]) };
  return { key, rangeEnd: prefixEnd(key) };
}

/** Decoded responses always carry every field; this only narrows the optional types. */
export function header(h: pb.ResponseHeader | undefined): ResponseHeader {
  return (h ?? { clusterId: 0n, memberId: 0n, revision: 0n, raftTerm: 0n }) as ResponseHeader;
}

export function rangeResult(r: pb.RangeResponse): RangeResult {
  return { header: header(r.header), kvs: (r.kvs ?? []) as KeyValue[], more: r.more ?? false, count: r.count ?? 0n };
}

/** Builders for Txn compares and operations, so callers write intent rather than protobuf. */
export const compare = {
  /** CreateRevision(key) == rev: "this key still exists as the incarnation I created". */
  createRevision(key: Bytes, result: '=' | '!=' | '<' | '>', rev: bigint): pb.Compare {
    return { key: toBuffer(key), target: pb.Compare_CompareTarget.CREATE, result: cmp(result), createRevision: rev };
  },
  modRevision(key: Bytes, result: '=' | '!=' | '<' | '>', rev: bigint): pb.Compare {
    return { key: toBuffer(key), target: pb.Compare_CompareTarget.MOD, result: cmp(result), modRevision: rev };
  },
  value(key: Bytes, result: '=' | '!=' | '<' | '>', value: Bytes): pb.Compare {
    return { key: toBuffer(key), target: pb.Compare_CompareTarget.VALUE, result: cmp(result), value: toBuffer(value) };
  },
  /** Lease(key) == lease: the key is still attached to this lease. */
  lease(key: Bytes, result: '=' | '!=' | '<' | '>', lease: bigint): pb.Compare {
    return { key: toBuffer(key), target: pb.Compare_CompareTarget.LEASE, result: cmp(result), lease };
  },
  version(key: Bytes, result: '=' | '!=' | '<' | '>', version: bigint): pb.Compare {
    return { key: toBuffer(key), target: pb.Compare_CompareTarget.VERSION, result: cmp(result), version };
  },
};

function cmp(r: '=' | '!=' | '<' | '>'): pb.Compare_CompareResult {
  switch (r) {
    case '=':
      return pb.Compare_CompareResult.EQUAL;
    case '!=':
      return pb.Compare_CompareResult.NOT_EQUAL;
    case '<':
      return pb.Compare_CompareResult.LESS;
    case '>':
      return pb.Compare_CompareResult.GREATER;
  }
}

export const op = {
  put(key: Bytes, value: Bytes, lease = 0n): pb.RequestOp {
    return { requestPut: { key: toBuffer(key), value: toBuffer(value), lease } };
  },
  /** Writes the key again with its value and lease unchanged: only its ModRevision and Version move. */
  touch(key: Bytes): pb.RequestOp {
    return { requestPut: { key: toBuffer(key), value: Buffer.alloc(0), ignoreValue: true, ignoreLease: true } };
  },
  range(request: pb.RangeRequest): pb.RequestOp {
    return { requestRange: request };
  },
  get(key: Bytes): pb.RequestOp {
    return { requestRange: { key: toBuffer(key) } };
  },
  delete(key: Bytes): pb.RequestOp {
    return { requestDeleteRange: { key: toBuffer(key) } };
  },
};

/** The RangeResponse of a Txn's i-th operation. */
export function txnRange(t: TxnResult, i: number): RangeResult {
  const r = t.responses[i]?.responseRange;
  if (!r) throw new Error(`txn response ${i} is not a range`);
  return rangeResult(r);
}

/** Whether `key` falls inside `range` (etcd's rules: an empty rangeEnd is the key alone, "\0" no end). */
export function inRange(key: string, range: { key: Buffer; rangeEnd: Buffer }): boolean {
  const k = Buffer.from(key);
  if (k.compare(range.key) < 0) return false;
  if (range.rangeEnd.length === 0) return k.equals(range.key);
  return (range.rangeEnd.length === 1 && range.rangeEnd[0] === 0) || k.compare(range.rangeEnd) < 0;
}
