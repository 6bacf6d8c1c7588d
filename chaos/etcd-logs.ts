// What the members' own logs say about lease revocations, for the checker's attribution of early
// lease expiries to etcd (checker/leases.ts deposedLeaderRevoke).
//
// etcd's revokeExpiredLeases (server/etcdserver/server.go; 3.4.31+, 3.5.13+, 3.6, 3.7) checks
// once, before a batch, that the member is still the Raft leader (ensureLeadership, which since
// v3.4.34, v3.5.16 and 3.6.0 a member that ticked within the last 3 heartbeats passes without asking
// anyone: true right after SIGCONT). It then proposes one LeaseRevoke per lease, at most 16
// (maxPendingRevokes) in flight. A member frozen as leader past the TTL wakes with every lease
// "expired" in its lessor. Its first 16 revokes go into its own log in the old term, are overwritten
// by the new leader, and each blocks for the request timeout (5 s + 2 x election timeout, 7 s by
// default) before etcd logs "failed to revoke lease ... request timed out". Each freed slot sends the
// next lease of the same stale list, now as a follower: raft forwards the proposal to the new
// leader, which commits it and revokes a lease that it had been renewing all along. So the
// revocations of leases past the 16th land one request timeout (or several) after the wake, each
// right after one of those "failed to revoke lease" lines.
import { readFile } from 'node:fs/promises';

/** A member logged that one of its own revocations of an "expired" lease timed out: a slot freed. */
export interface RevokeTimeout {
  /** m0, m1, ... as the nemesis names members. */
  member: string;
  /** On the parent's common clock (ms). */
  at: number;
  lease: string;
}

/**
 * Every "failed to revoke lease" line whose error is a timeout, from the members' zap JSON logs.
 * `wallToCommon` maps etcd's wall-clock timestamps (UTC, µs) onto the parent's clock.
 */
export async function readRevokeTimeouts(
  logs: { member: string; file: string }[],
  wallToCommon: (wallMs: number) => number,
): Promise<RevokeTimeout[]> {
  const out: RevokeTimeout[] = [];
  for (const { member, file } of logs) {
    const text = await readFile(file, 'utf8').catch(() => '');
    out.push(...parseRevokeTimeouts(member, text, wallToCommon));
  }
  return out.sort((a, b) => a.at - b.at);
}

export function parseRevokeTimeouts(member: string, text: string, wallToCommon: (wallMs: number) => number): RevokeTimeout[] {
  const out: RevokeTimeout[] = [];
  for (const line of text.split('\n')) {
    if (!line.includes('failed to revoke lease')) continue;
    let j: { ts?: string; msg?: string; error?: string; 'lease-id'?: string };
    try {
      j = JSON.parse(line) as typeof j;
    } catch {
      continue;
    }
    if (j.msg !== 'failed to revoke lease' || !/timed out|deadline exceeded/i.test(j.error ?? '')) continue;
    const wall = Date.parse(j.ts ?? '');
    if (!Number.isFinite(wall)) continue;
    out.push({ member, at: wallToCommon(wall), lease: j['lease-id'] ?? '' });
  }
  return out;
}
