// etcd's gRPC methods as the transport takes them: the HTTP/2 path and the message codecs that
// ts-proto generates in src/proto. Only the methods this library calls.
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import * as pb from '../proto/etcd.js';
import type { Method } from './transport/transport.js';
import { decodeKeepAliveResponse, encodeKeepAliveRequest } from './lease-codec.js';

function method<Req, Res>(
  service: { fullName: string },
  name: string,
  request: pb.MessageFns<Req>,
  response: pb.MessageFns<Res>,
): Method<Req, Res> {
  return {
    path: `/${service.fullName}/${name}`,
    encode: (req) => encodeWith(request, req),
    decode: (bytes) => response.decode(bytes),
  };
}

/**
 * One writer for every request of the process: a writer per request would allocate its buffer anew,
 * and again each time it grows (128, 256, ... bytes, each an ArrayBuffer outside the heap), which
 * costs more than the encoding itself. Encoding is synchronous, so no two requests ever use it at
 * once. A writer that grew past REUSED_WRITER_BYTES is dropped after use (a large Put must not keep
 * its buffer for good).
 */
let writer = new BinaryWriter();
const REUSED_WRITER_BYTES = 64 * 1024;

/** `message` encoded with the shared writer, which is left empty whether or not encoding throws. */
function encodeWith<T>(fns: pb.MessageFns<T>, message: T): Uint8Array {
  let out: Uint8Array | undefined;
  try {
    out = fns.encode(message, writer).finish();
  } finally {
    // A message refused halfway (an int64 out of range) leaves its bytes in the writer: a new one.
    if (out === undefined || out.length > REUSED_WRITER_BYTES) writer = new BinaryWriter();
  }
  return out;
}

const kv = pb.KVDefinition;
export const KV = {
  range: method(kv, 'Range', pb.RangeRequest, pb.RangeResponse),
  put: method(kv, 'Put', pb.PutRequest, pb.PutResponse),
  deleteRange: method(kv, 'DeleteRange', pb.DeleteRangeRequest, pb.DeleteRangeResponse),
  txn: method(kv, 'Txn', pb.TxnRequest, pb.TxnResponse),
  compact: method(kv, 'Compact', pb.CompactionRequest, pb.CompactionResponse),
};

export const Watch = {
  watch: method(pb.WatchDefinition, 'Watch', pb.WatchRequest, pb.WatchResponse),
};

const lease = pb.LeaseDefinition;
export const Lease = {
  leaseGrant: method(lease, 'LeaseGrant', pb.LeaseGrantRequest, pb.LeaseGrantResponse),
  leaseRevoke: method(lease, 'LeaseRevoke', pb.LeaseRevokeRequest, pb.LeaseRevokeResponse),
  // By hand: sent and answered once per lease per renewal interval (lease-codec.ts).
  leaseKeepAlive: {
    path: `/${lease.fullName}/LeaseKeepAlive`,
    encode: encodeKeepAliveRequest,
    decode: decodeKeepAliveResponse,
  } satisfies Method<pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse>,
  leaseTimeToLive: method(lease, 'LeaseTimeToLive', pb.LeaseTimeToLiveRequest, pb.LeaseTimeToLiveResponse),
  leaseLeases: method(lease, 'LeaseLeases', pb.LeaseLeasesRequest, pb.LeaseLeasesResponse),
};

export const Maintenance = {
  status: method(pb.MaintenanceDefinition, 'Status', pb.StatusRequest, pb.StatusResponse),
};

export const Cluster = {
  memberList: method(pb.ClusterDefinition, 'MemberList', pb.MemberListRequest, pb.MemberListResponse),
};

const auth = pb.AuthDefinition;
export const Auth = {
  authenticate: method(auth, 'Authenticate', pb.AuthenticateRequest, pb.AuthenticateResponse),
  authStatus: method(auth, 'AuthStatus', pb.AuthStatusRequest, pb.AuthStatusResponse),
};
