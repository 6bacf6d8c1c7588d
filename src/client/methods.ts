// etcd's gRPC methods as the transport takes them: the HTTP/2 path and the message codecs that
// ts-proto generates in src/proto. Only the methods this library calls.
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
    encode: (req) => request.encode(req).finish(),
    decode: (bytes) => response.decode(bytes),
  };
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
