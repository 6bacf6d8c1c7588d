// What etcd tells about a lease, a member, the cluster and its auth, as the Client returns it.
import type { ResponseHeader } from './kv.js';

export interface LeaseTimeToLive {
  /** Seconds left; -1 when the lease does not exist. */
  ttl: number;
  grantedTtl: number;
  keys: Buffer[];
}

/** One member's Status (etcd's Maintenance.Status). */
export interface MemberStatus {
  /** `header.memberId` is the id of the member that answered. */
  header: ResponseHeader;
  /** The member's etcd version, e.g. `3.6.9`. */
  version: string;
  /** The id of the Raft leader as this member sees it; 0n when it has none. */
  leader: bigint;
  raftTerm: bigint;
  /** Size of the member's database file in bytes. */
  dbSize: bigint;
  /** Whether the member is a learner (a non-voting member catching up). */
  isLearner: boolean;
  /**
   * The alarms and errors the member reports (etcd's StatusResponse.errors), e.g.
   * `memberID:... alarm:NOSPACE`; empty when all is well.
   */
  alarms: string[];
}

/** A member of the cluster, as MemberList gives it. */
export interface ClusterMember {
  /** The member id (etcdctl prints it in hex: `id.toString(16)`). */
  id: bigint;
  /** Its name; empty for a member added but not started yet. */
  name: string;
  /** The URLs it talks to its peers on. */
  peerUrls: string[];
  /** The URLs it serves clients on; empty for a member not started yet. */
  clientUrls: string[];
  /** Whether it is a learner (non-voting). */
  isLearner: boolean;
}

/** Whether authentication is on (etcd's Auth.AuthStatus). */
export interface AuthStatus {
  enabled: boolean;
  /** The revision of etcd's auth store: it grows with every change to users, roles and permissions. */
  authRevision: bigint;
}
