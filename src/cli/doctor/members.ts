// Every member's Status, asked directly (no failover to another member), with fallbacks for a
// member that refuses Status (the root role) or has no leader.
import {
  AuthenticationError,
  NoLeaderError,
  PermissionDeniedError,
  UnavailableError,
  type Client,
  type ClusterMember,
} from '../../index.js';
import { parseEndpoint, shownEndpoint } from '../../client/endpoints.js';
import { requestJson, type ClientTls } from '../../launcher/http.js';
import type { MemberReport } from './report.js';

export interface MemberProbeOptions {
  prefix: string;
  signal: AbortSignal;
  /**
   * A Client on one endpoint, with the same TLS and auth options: for a member that MemberList
   * advertises at a URL that is not among the endpoints given (those are asked through the main
   * client, pinned to each in turn).
   */
  memberClient: (endpoint: string) => Client;
  /** The TLS material the options name, for the /version fallback: undefined for plain HTTP. */
  tls: ClientTls | undefined;
}

/** The members from MemberList, or undefined when it is not available (then the endpoints given are checked). */
export async function memberList(client: Client, signal: AbortSignal): Promise<ClusterMember[] | undefined> {
  try {
    return await client.memberList({ signal });
  } catch (err) {
    if (err instanceof AuthenticationError || signal.aborted) throw err;
    return undefined;
  }
}

/**
 * Status from every member: first through the endpoints given (which are reachable from here even
 * when the URLs members advertise are not), then for each listed member not seen that way, through
 * its advertised client URLs.
 */
export async function memberStatuses(client: Client, listed: ClusterMember[] | undefined, o: MemberProbeOptions): Promise<MemberReport[]> {
  const byEndpoint = await Promise.all(
    client.endpoints.map((e) => memberStatus(`${client.secure ? 'https://' : ''}${e}`, o, { client, endpoint: e })),
  );
  const out: MemberReport[] = [];
  const seen = new Set<string>();
  for (const r of byEndpoint) {
    // An endpoint that did not answer is still a member we know, when it is one a member advertises.
    const m = listed?.find((l) =>
      r.id !== null ? l.id.toString(16) === r.id : l.clientUrls.some((u) => targetOf(u) === targetOf(r.endpoint)),
    );
    if (m) {
      r.id = m.id.toString(16);
      r.name = m.name || null;
      r.isLearner ||= m.isLearner;
    }
    // Two endpoints of one member (e.g. a name and an address) count once.
    if (r.id !== null && seen.has(r.id)) continue;
    if (r.id !== null) seen.add(r.id);
    out.push(r);
  }
  if (!listed) return out;
  const rest = listed.filter((m) => !seen.has(m.id.toString(16)));
  const more = await Promise.all(
    rest.map(async (m): Promise<MemberReport> => {
      const base = { id: m.id.toString(16), name: m.name || null, isLearner: m.isLearner };
      if (m.clientUrls.length === 0) return { ...emptyMember('-'), ...base, error: 'not started yet (it advertises no client URL)' };
      let last: MemberReport | undefined;
      for (const url of m.clientUrls) {
        last = await memberStatus(url, o);
        if (last.version !== null) break;
      }
      return { ...last!, ...base };
    }),
  );
  // In the cluster's own order.
  const index = (r: MemberReport): number => {
    const i = listed.findIndex((l) => l.id.toString(16) === r.id);
    return i < 0 ? listed.length : i;
  };
  return [...out, ...more].sort((a, b) => index(a) - index(b));
}

/** `host:port` of an endpoint or URL; undefined when it is not one. */
function targetOf(url: string): string | undefined {
  try {
    return parseEndpoint(url).target;
  } catch {
    return undefined;
  }
}

function emptyMember(endpoint: string): MemberReport {
  return {
    id: null,
    name: null,
    endpoint,
    version: null,
    leader: null,
    hasLeader: null,
    statusRefused: false,
    isLeader: false,
    isLearner: false,
    raftTerm: null,
    dbSize: null,
    alarms: [],
    error: null,
  };
}

/**
 * One member's Status, with no failover to another member: through `via`, the main client pinned
 * to one of its endpoints, or else through a Client on that endpoint alone (closed after).
 */
async function memberStatus(endpoint: string, o: MemberProbeOptions, via?: { client: Client; endpoint: string }): Promise<MemberReport> {
  const r = emptyMember(targetOf(endpoint) ?? shownEndpoint(endpoint));
  const c = via?.client ?? o.memberClient(endpoint);
  const call = { signal: o.signal, timeoutMs: c.callTimeoutMs, ...(via ? { endpoint: via.endpoint } : {}) };
  const failed = (err: unknown): void => {
    if (o.signal.aborted) throw o.signal.reason;
    if (err instanceof AuthenticationError) throw err;
    // A member cut off from the leader refuses calls that carry `hasleader`, as every call of this
    // library does: it answers, but has no leader.
    if (err instanceof NoLeaderError) {
      r.hasLeader = false;
      r.error = 'no leader: the member answers, but has no Raft leader';
    } else {
      r.error = reason(err);
    }
  };
  try {
    const s = await c.status(call);
    const id = s.header.memberId;
    const leader = s.leader;
    r.id = id.toString(16);
    r.version = s.version;
    r.leader = leader.toString(16);
    r.hasLeader = leader !== 0n;
    r.isLeader = leader !== 0n && leader === id;
    r.isLearner = s.isLearner;
    r.raftTerm = s.raftTerm;
    r.dbSize = s.dbSize;
    r.alarms = s.alarms;
  } catch (err) {
    if (!(err instanceof PermissionDeniedError)) {
      failed(err);
      // A member without a leader still tells its version over HTTP.
      if (r.hasLeader === false) r.version = await httpVersion(endpoint, o.tls, call).catch(() => null);
      return r;
    }
    // Status needs the root role on some versions (3.6.0 on, 3.5.28 on, until etcd relaxed it
    // again): the version from the member's /version instead, and its leader from a read that
    // carries `hasleader`. Any answer but "no leader" proves it has one, a refusal included: etcd
    // checks the leader before the permission.
    r.statusRefused = true;
    try {
      await c.get(`${o.prefix}leader-probe`, call);
      r.hasLeader = true;
    } catch (e) {
      if (e instanceof PermissionDeniedError) r.hasLeader = true;
      else failed(e);
    }
    if (r.hasLeader === false || r.error === null) {
      try {
        r.version = await httpVersion(endpoint, o.tls, call);
      } catch (e) {
        if (o.signal.aborted) throw o.signal.reason;
        r.error ??= `etcd refused Status (it needs the root role here), and ${oneLine(e)}`;
      }
    }
  } finally {
    if (!via) await c.close();
  }
  return r;
}

/** The server version from a member's `/version` (served on its client port without auth). */
async function httpVersion(
  endpoint: string,
  tls: ClientTls | undefined,
  options: { signal: AbortSignal; timeoutMs: number },
): Promise<string> {
  const secure = /^https:\/\//i.test(endpoint) || tls !== undefined;
  const url = `${secure ? 'https' : 'http'}://${endpoint.replace(/^[a-z]+:\/\//i, '').replace(/\/+$/, '')}/version`;
  const body = await requestJson(url, 'GET', secure ? tls : undefined, options).catch((err: unknown) => {
    throw new Error(`reading ${url} failed: ${oneLine(err)}`, { cause: err });
  });
  const v = (body as { etcdserver?: unknown } | null)?.etcdserver;
  if (typeof v !== 'string' || v === '') throw new Error(`${url} did not say the version`);
  return v;
}

/** Why a member could not be asked: for one we could not connect to, the reason alone, without the advice meant for a whole command. */
function reason(err: unknown): string {
  return err instanceof UnavailableError && err.unreachable !== undefined ? `unreachable: ${err.unreachable}` : oneLine(err);
}

/** An error's message on one line. */
export function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s*\n\s*/g, ' ');
}
