// What the client's decoder makes of an answer: the simulated members build their answers as
// plain objects, and the library must see them as if they had crossed the wire (every field with
// its default, bytes as fresh Buffers, nothing else). The answers a schedule sends most (Status
// too: each Client asks it) are copied here field by field, as the generated decoder fills them;
// any other goes through the encoder and the decoder. test/sim-wire.test.ts holds the copies to
// what the round trip gives.
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import * as pb from '../../proto/etcd.js';

/** One writer for every message: finish() copies out what it wrote and keeps its buffer for the next. */
const writer = new BinaryWriter();

/** Through the wire format and back. */
export function roundTrip<T>(fns: pb.MessageFns<unknown>, message: T): T {
  return fns.decode(fns.encode(message, writer).finish()) as T;
}

function bytes(b: Uint8Array | undefined): Buffer {
  return b === undefined || b.length === 0 ? Buffer.alloc(0) : Buffer.from(b);
}

function header(h: pb.ResponseHeader | undefined): pb.ResponseHeader | undefined {
  if (h === undefined) return undefined;
  return { clusterId: h.clusterId ?? 0n, memberId: h.memberId ?? 0n, revision: h.revision ?? 0n, raftTerm: h.raftTerm ?? 0n };
}

function keyValue(kv: pb.KeyValue): pb.KeyValue {
  return {
    key: bytes(kv.key),
    createRevision: kv.createRevision ?? 0n,
    modRevision: kv.modRevision ?? 0n,
    version: kv.version ?? 0n,
    value: bytes(kv.value),
    lease: kv.lease ?? 0n,
  };
}

function optionalKeyValue(kv: pb.KeyValue | undefined): pb.KeyValue | undefined {
  return kv === undefined ? undefined : keyValue(kv);
}

function range(r: pb.RangeResponse): pb.RangeResponse {
  return { header: header(r.header), kvs: (r.kvs ?? []).map(keyValue), more: r.more ?? false, count: r.count ?? 0n };
}

function put(r: pb.PutResponse): pb.PutResponse {
  return { header: header(r.header), prevKv: optionalKeyValue(r.prevKv) };
}

function deleteRange(r: pb.DeleteRangeResponse): pb.DeleteRangeResponse {
  return { header: header(r.header), deleted: r.deleted ?? 0n, prevKvs: (r.prevKvs ?? []).map(keyValue) };
}

function responseOp(op: pb.ResponseOp): pb.ResponseOp {
  return {
    responseRange: op.responseRange === undefined ? undefined : range(op.responseRange),
    responsePut: op.responsePut === undefined ? undefined : put(op.responsePut),
    responseDeleteRange: op.responseDeleteRange === undefined ? undefined : deleteRange(op.responseDeleteRange),
    responseTxn: op.responseTxn === undefined ? undefined : txn(op.responseTxn),
  };
}

function txn(r: pb.TxnResponse): pb.TxnResponse {
  return { header: header(r.header), succeeded: r.succeeded ?? false, responses: (r.responses ?? []).map(responseOp) };
}

function event(e: pb.Event): pb.Event {
  return { type: e.type ?? 0, kv: optionalKeyValue(e.kv), prevKv: optionalKeyValue(e.prevKv) };
}

function watch(r: pb.WatchResponse): pb.WatchResponse {
  return {
    header: header(r.header),
    watchId: r.watchId ?? 0n,
    created: r.created ?? false,
    canceled: r.canceled ?? false,
    compactRevision: r.compactRevision ?? 0n,
    cancelReason: r.cancelReason ?? '',
    fragment: r.fragment ?? false,
    events: (r.events ?? []).map(event),
  };
}

function keepAlive(r: pb.LeaseKeepAliveResponse): pb.LeaseKeepAliveResponse {
  return { header: header(r.header), ID: r.ID ?? 0n, TTL: r.TTL ?? 0n };
}

function leaseGrant(r: pb.LeaseGrantResponse): pb.LeaseGrantResponse {
  return { header: header(r.header), ID: r.ID ?? 0n, TTL: r.TTL ?? 0n, error: r.error ?? '' };
}

function leaseRevoke(r: pb.LeaseRevokeResponse): pb.LeaseRevokeResponse {
  return { header: header(r.header) };
}

function status(r: pb.StatusResponse): pb.StatusResponse {
  return {
    header: header(r.header),
    version: r.version ?? '',
    dbSize: r.dbSize ?? 0n,
    leader: r.leader ?? 0n,
    raftIndex: r.raftIndex ?? 0n,
    raftTerm: r.raftTerm ?? 0n,
    raftAppliedIndex: r.raftAppliedIndex ?? 0n,
    errors: [...(r.errors ?? [])],
    dbSizeInUse: r.dbSizeInUse ?? 0n,
    isLearner: r.isLearner ?? false,
  };
}

/** The copy for each message type that has one (the others take the round trip). */
const COPIES = new Map<pb.MessageFns<unknown>, (message: never) => unknown>([
  [pb.RangeResponse, range],
  [pb.PutResponse, put],
  [pb.DeleteRangeResponse, deleteRange],
  [pb.TxnResponse, txn],
  [pb.WatchResponse, watch],
  [pb.LeaseKeepAliveResponse, keepAlive],
  [pb.LeaseGrantResponse, leaseGrant],
  [pb.LeaseRevokeResponse, leaseRevoke],
  [pb.StatusResponse, status],
]);

/** Types with a copy of their own, for the test that holds them to the round trip. */
export const COPIED: readonly pb.MessageFns<unknown>[] = [...COPIES.keys()];

/** `message` as the client's decoder gives it. */
export function asDecoded<T>(fns: pb.MessageFns<unknown>, message: T): T {
  const copy = COPIES.get(fns);
  return copy ? (copy(message as never) as T) : roundTrip(fns, message);
}
