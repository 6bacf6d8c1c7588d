import type * as pb from '../proto/etcd.js';
import * as rpc from './methods.js';
import { closeStream, Connection, type CallOptions, type CallProgress, type ConnectionOptions } from './connection.js';
import { TokenSource, type AuthOptions } from './auth.js';
import {
  DeadlineExceededError,
  EtcdError,
  InvalidArgumentError,
  LeaseNotFoundError,
  UnavailableError,
  etcdSays,
  fromTransportError,
  isTransportError,
  isStaleToken,
} from './errors.js';
import { settledWithin } from './backoff.js';
import { KeepAliveHub } from './lease.js';
import { Coalescer, type Coalescible } from './coalescer.js';
import { WatchHub, type Watch, type WatchOptions, type WatchSink } from './watch.js';
import { Namespace } from './namespace.js';
import { ClientTelemetry, type TelemetryOptions } from './telemetry.js';
import type { Attachment, AttachmentKey } from './attachments.js';
import type { AuthStatus, ClusterMember, LeaseTimeToLive, MemberStatus } from './info.js';
import type { DiagnosticsOptions } from '../diagnostics.js';
import {
  header,
  prefixRange,
  rangeResult,
  toBuffer,
  type Bytes,
  type KeyValue,
  type RangeResult,
  type ResponseHeader,
  type TxnResult,
} from './kv.js';

/**
 * How to reach etcd (endpoints, TLS, timeouts), who to be (auth), and where metrics and spans go
 * (OpenTelemetry providers, default the global ones: no-ops until an SDK is installed).
 */
export interface ClientOptions extends ConnectionOptions, TelemetryOptions, DiagnosticsOptions {
  /** etcd user and password; the token is fetched on first use and refreshed when it expires. */
  auth?: AuthOptions;
  /**
   * A key prefix, such as `tenant-a/`: every key this client reads, writes, compares and watches
   * gets it, and every key it returns loses it, as with Go's `namespace` package (so a namespaced Go
   * client on the same prefix sees the same keys). Locks and elections of two namespaces never meet.
   * Default: none.
   */
  namespace?: string;
}

export interface GetOptions extends CallOptions {
  /** Every key starting with `key`. */
  prefix?: boolean;
  /** Read at this past revision. */
  revision?: bigint;
  limit?: number;
}

/**
 * A thin etcd v3 client: key-value reads and writes, transactions, leases and watches over one
 * gRPC connection per endpoint, with one shared Watch stream and one shared LeaseKeepAlive stream.
 * Reads carry `hasleader` by default, so a member cut off from quorum is skipped rather than trusted.
 */
export class Client implements AsyncDisposable {
  /** @internal */ readonly conn: Connection;
  /** @internal */ readonly watches: WatchHub;
  /** @internal the key prefix of ClientOptions.namespace, if any. */
  readonly namespace?: Namespace;
  /** @internal */ readonly keepAlives: KeepAliveHub;
  /** @internal this library's own Txns of one tick, sent together (see coalescer.ts). */
  readonly coalescer: Coalescer;
  /** @internal the client's own metrics (no-ops without an OpenTelemetry SDK), and the options of the layers above. */
  readonly telemetry: ClientTelemetry;
  /** State the layers above keep on this client (see attached), closed with it. */
  private readonly attachments = new Map<AttachmentKey<Attachment, Client>, Attachment>();
  private closing?: Promise<void>;
  /** Work close() lets finish first, for at most callTimeoutMs (see finishBeforeClose). */
  private readonly finishing = new Set<Promise<unknown>>();
  /** Ids of grants that failed before their request was sent: no such lease exists. */
  private readonly unsentGrants = new Set<bigint>();

  /**
   * With no `endpoints`, the client uses `ETCDCTL_ENDPOINTS` (comma-separated, as etcdctl and
   * `etcd-concurrency dev` print it) when set and not empty, else `127.0.0.1:2379`.
   */
  constructor(options: ClientOptions = {}) {
    this.telemetry = new ClientTelemetry(options);
    const fromEnv = options.endpoints === undefined ? process.env.ETCDCTL_ENDPOINTS?.trim() : undefined;
    this.conn = new Connection(fromEnv ? { ...options, endpoints: fromEnv } : options, this.telemetry);
    if (options.auth) {
      if (!options.auth.username) throw new InvalidArgumentError('auth: the user name is empty; pass user:password');
      this.conn.tokens = new TokenSource(this.conn, options.auth);
    }
    if (options.namespace !== undefined) this.namespace = new Namespace(options.namespace);
    this.watches = new WatchHub(this.conn, this.namespace);
    this.keepAlives = new KeepAliveHub(this.conn);
    this.coalescer = new Coalescer(this.conn, this.telemetry);
  }

  /** The endpoints as parsed (host:port). */
  get endpoints(): string[] {
    return this.conn.endpoints.map((e) => e.target);
  }

  /** The endpoint calls currently go to. */
  get activeEndpoint(): string {
    return this.conn.activeTarget;
  }

  /** How long a connect attempt waits for one endpoint (ClientOptions.dialTimeoutMs). */
  get dialTimeoutMs(): number {
    return this.conn.dialTimeoutMs;
  }

  /** The default deadline of one call, failover retries included (ClientOptions.callTimeoutMs). */
  get callTimeoutMs(): number {
    return this.conn.callTimeoutMs;
  }

  /** Whether calls go over TLS (an `https://` endpoint, or ClientOptions.tls). */
  get secure(): boolean {
    return this.conn.secure;
  }

  /** Raw Range: full control over sorting, limits and revision bounds. */
  async range(request: pb.RangeRequest, options?: CallOptions): Promise<RangeResult> {
    const ns = this.namespace;
    const r = rangeResult(await this.conn.unary(rpc.KV.range, ns ? ns.rangeRequest(request) : request, 'idempotent', options));
    this.saw(r.header);
    if (ns) ns.kvs(r.kvs);
    return r;
  }

  /** The value of one key, or undefined. */
  async get(key: Bytes, options?: CallOptions & { revision?: bigint }): Promise<KeyValue | undefined> {
    const r = await this.range({ key: toBuffer(key), revision: options?.revision ?? 0n }, options);
    return r.kvs[0];
  }

  /** Every key with the prefix, in key order. */
  async getPrefix(prefix: Bytes, options?: GetOptions): Promise<RangeResult> {
    return this.range({ ...prefixRange(prefix), revision: options?.revision ?? 0n, limit: BigInt(options?.limit ?? 0) }, options);
  }

  /**
   * Writes a key. Not retried when its outcome is unknown: you get WriteOutcomeUnknownError.
   * Make it a Txn guarded on the key's revision when you need a retry-safe write.
   */
  async put(key: Bytes, value: Bytes, options?: CallOptions & { lease?: bigint }): Promise<ResponseHeader> {
    const r = await this.conn.unary(
      rpc.KV.put,
      { key: this.namespace ? this.namespace.key(key) : toBuffer(key), value: toBuffer(value), lease: options?.lease ?? 0n },
      'at-most-once',
      options,
    );
    return this.saw(header(r.header));
  }

  /** Deletes a key (or a prefix) and returns how many were deleted. */
  async delete(key: Bytes, options?: CallOptions & { prefix?: boolean }): Promise<bigint> {
    const request = options?.prefix ? prefixRange(key) : { key: toBuffer(key) };
    const r = await this.conn.unary(
      rpc.KV.deleteRange,
      this.namespace ? this.namespace.deleteRequest(request) : request,
      'at-most-once',
      options,
    );
    return r.deleted ?? 0n;
  }

  /**
   * A transaction. Pass `idempotent: true` only when repeating it is harmless (for example it is
   * guarded on a key's CreateRevision); then an ambiguous failure is retried on another endpoint.
   * `progress` (for this library's queues) records whether such a retried attempt may still be
   * applied later.
   */
  async txn(
    request: pb.TxnRequest,
    options?: CallOptions & {
      idempotent?: boolean;
      /** @internal this library's own idempotent Txn, which may share a request with others (see coalescer.ts). */
      coalesce?: Coalescible;
    },
    progress?: CallProgress,
  ): Promise<TxnResult> {
    const ns = this.namespace;
    const req = ns ? ns.txnRequest(request) : request;
    const r =
      options?.coalesce && options.idempotent
        ? await this.coalescer.txn(req, options, options.coalesce.scope, progress)
        : await this.conn.unary(rpc.KV.txn, req, options?.idempotent ? 'idempotent' : 'at-most-once', options, progress);
    const responses = r.responses ?? [];
    return { header: this.saw(header(r.header)), succeeded: r.succeeded ?? false, responses: ns ? ns.txnResponses(responses) : responses };
  }

  /** Discards history up to `revision` (tests and operators). */
  async compact(revision: bigint, options?: CallOptions & { physical?: boolean }): Promise<void> {
    await this.conn.unary(rpc.KV.compact, { revision, physical: options?.physical ?? false }, 'idempotent', options);
  }

  /**
   * Grants a lease. With `id` the grant is safe to retry: a retry that finds the lease already
   * granted returns it instead of creating a second one.
   */
  async leaseGrant(ttlSeconds: number, options?: CallOptions & { id?: bigint }): Promise<{ id: bigint; ttl: number }> {
    const id = options?.id ?? 0n;
    this.unsentGrants.delete(id);
    const progress = { sent: false };
    try {
      const r = await this.conn.unary(
        rpc.Lease.leaseGrant,
        { TTL: BigInt(ttlSeconds), ID: id },
        id === 0n ? 'at-most-once' : 'idempotent',
        options,
        progress,
      );
      if (r.error) throw new EtcdError(`granting a lease: ${r.error}`);
      return { id: r.ID ?? 0n, ttl: Number(r.TTL ?? 0n) };
    } catch (err) {
      if (id !== 0n && isAlreadyExists(err)) {
        const t = await this.leaseTimeToLive(id, options);
        return { id, ttl: t.grantedTtl };
      }
      // Never sent (no endpoint connected, or aborted first): no lease can exist, so the revoke that
      // cleans up after a failed grant has nothing to do and must not dial the same dead endpoints.
      if (id !== 0n && !progress.sent) this.rememberUnsent(id);
      throw err;
    }
  }

  /** Revokes a lease and deletes its keys. Revoking a lease that is already gone is not an error. */
  async leaseRevoke(id: bigint, options?: CallOptions): Promise<void> {
    if (this.unsentGrants.delete(id)) return;
    try {
      await this.conn.unary(rpc.Lease.leaseRevoke, { ID: id }, 'idempotent', options);
    } catch (err) {
      if (isLeaseNotFound(err)) return;
      throw err;
    }
  }

  async leaseTimeToLive(id: bigint, options?: CallOptions & { keys?: boolean }): Promise<LeaseTimeToLive> {
    const r = await this.conn.unary(rpc.Lease.leaseTimeToLive, { ID: id, keys: options?.keys ?? false }, 'idempotent', options);
    const keys = r.keys ?? [];
    return {
      ttl: Number(r.TTL ?? -1n),
      grantedTtl: Number(r.grantedTTL ?? 0n),
      keys: this.namespace ? this.namespace.ownKeys(keys) : keys,
    };
  }

  /** Every lease the cluster knows (tests use it to prove nothing leaked). */
  async leaseLeases(options?: CallOptions): Promise<bigint[]> {
    const r = await this.conn.unary(rpc.Lease.leaseLeases, {}, 'idempotent', options);
    return (r.leases ?? []).map((l) => l.ID ?? 0n);
  }

  /**
   * Watches a key or prefix on the shared Watch stream. A watch whose consumer leaves 1,024 batches
   * unread is taken off the stream (etcd sends it nothing more) until the consumer is down to 256;
   * then it resumes from the revision after the last batch it delivered, so nothing is lost or
   * repeated, unless compaction removed that history meanwhile (it then ends with a CompactedError).
   * Memory stays bounded, and the other watches never wait for a slow consumer.
   */
  watch(key: Bytes, options?: WatchOptions): Watch {
    return this.watches.watch(key, options);
  }

  /** @internal a watch that hands its batches to `sink` rather than to an iterator (a queue's waiter). */
  watchInto(key: Bytes, options: WatchOptions, sink: WatchSink): Watch {
    return this.watches.watch(key, options, sink);
  }

  /**
   * Status of the member at the current endpoint, or of the one `options.endpoint` names (then
   * with no failover: a member that does not answer fails the call). Some etcd versions refuse
   * Status to users without the root role (PermissionDeniedError); a member cut off from the Raft
   * leader refuses it while `requireLeader` is on (UnavailableError saying it has no leader).
   */
  async status(options?: CallOptions): Promise<MemberStatus> {
    const r = await this.conn.unary(rpc.Maintenance.status, {}, 'idempotent', options);
    return {
      header: header(r.header),
      version: r.version ?? '',
      leader: r.leader ?? 0n,
      raftTerm: r.raftTerm ?? 0n,
      dbSize: r.dbSize ?? 0n,
      isLearner: r.isLearner ?? false,
      alarms: r.errors ?? [],
    };
  }

  /** Every member of the cluster (etcd's Cluster.MemberList), in the cluster's order. */
  async memberList(options?: CallOptions): Promise<ClusterMember[]> {
    const r = await this.conn.unary(rpc.Cluster.memberList, {}, 'idempotent', options);
    return (r.members ?? []).map((m) => ({
      id: m.ID ?? 0n,
      name: m.name ?? '',
      peerUrls: m.peerURLs ?? [],
      clientUrls: m.clientURLs ?? [],
      isLearner: m.isLearner ?? false,
    }));
  }

  /**
   * Whether authentication is on (etcd's Auth.AuthStatus). etcd 3.5 and later; 3.4 has no such
   * call and fails it with an EtcdError whose `code` is 12 (gRPC UNIMPLEMENTED).
   */
  async authStatus(options?: CallOptions): Promise<AuthStatus> {
    const r = await this.conn.unary(rpc.Auth.authStatus, {}, 'idempotent', options);
    return { enabled: r.enabled ?? false, authRevision: r.authRevision ?? 0n };
  }

  /**
   * Renews lease `id` once, on a LeaseKeepAlive stream of its own (Go's KeepAliveOnce), and returns
   * the TTL etcd granted. Unlike a Session's renewals, which ride the shared stream and retry
   * quietly, a refusal is thrown as it comes: PermissionDeniedError when etcd (3.4.42+, 3.5.28+,
   * 3.6.9+, 3.7) wants put permission on a key attached to the lease, LeaseNotFoundError when the
   * lease is gone. Bounded by `options.timeoutMs` (default callTimeoutMs; DeadlineExceededError)
   * and `options.signal`; `options.endpoint` pins it to one endpoint. Never retried on another.
   */
  async leaseKeepAliveOnce(id: bigint, options?: CallOptions): Promise<{ ttl: number }> {
    const what = 'renewing a lease';
    const signal = options?.signal;
    signal?.throwIfAborted();
    const pinned = options?.endpoint === undefined ? undefined : this.conn.peerOf(options.endpoint);
    const timeoutMs = options?.timeoutMs ?? this.conn.callTimeoutMs;
    // One bound for the whole call: the caller's signal, or the deadline (typed as ours).
    const bound = new AbortController();
    const onAbort = (): void => bound.abort(signal!.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(
      () => bound.abort(new DeadlineExceededError(`${what}: no answer within ${timeoutMs} ms`)),
      Math.max(1, timeoutMs),
    );
    try {
      for (let retried = false; ; retried = true) {
        const target = pinned === undefined ? this.activeEndpoint : this.conn.endpoints[pinned]!.target;
        const opened = await untilAborted(this.conn.openStream(rpc.Lease.leaseKeepAlive, pinned), bound.signal, (late) =>
          closeStream(late.stream),
        ).catch((err: unknown) => {
          if (bound.signal.aborted || err instanceof EtcdError) throw err;
          const why = err instanceof Error ? err.message : String(err);
          throw new UnavailableError(`${what}: could not connect to etcd at ${target} (${why})`, { cause: err, unreachable: why });
        });
        const { stream } = opened;
        try {
          const ttl = await new Promise<bigint>((resolve, reject) => {
            const stop = (): void => reject(bound.signal.reason);
            if (bound.signal.aborted) return stop();
            bound.signal.addEventListener('abort', stop, { once: true });
            const done = (): void => bound.signal.removeEventListener('abort', stop);
            stream.on('data', (r: pb.LeaseKeepAliveResponse) => {
              done();
              resolve(r.TTL ?? 0n);
            });
            stream.on('error', (err: Error) => {
              done();
              reject(err);
            });
            stream.on('end', () => {
              done();
              reject(new UnavailableError(`${what}: the stream ended without an answer`));
            });
            stream.write({ ID: id });
          });
          if (ttl <= 0n) throw new LeaseNotFoundError(`${what}: lease not found (expired or revoked)`);
          return { ttl: Number(ttl) };
        } catch (err) {
          if (!isTransportError(err)) throw err;
          // A token that expired or that the member forgot: fetch a new one, once.
          if (!retried && opened.token !== undefined && isStaleToken(err.details) && this.conn.tokens) {
            this.conn.tokens.invalidate(opened.token);
            continue;
          }
          throw fromTransportError(err, what);
        } finally {
          closeStream(stream);
        }
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Ends every stream, timer and socket. Sessions on this client report loss at once. Their leases
   * are not revoked here (close the sessions first for that); they expire after their TTL. A release
   * still being retried in the background (its first delete failed) is given up to callTimeoutMs to
   * land first, so that the others need not wait for the lease to expire.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.finishing.size > 0) await settledWithin([...this.finishing], this.conn.callTimeoutMs);
      this.keepAlives.close();
      this.watches.close();
      this.conn.close();
      for (const a of this.attachments.values()) a.close();
      this.attachments.clear();
    })();
    return this.closing;
  }

  /**
   * @internal The state `key` names on this client, made on first use (see attachments.ts), closed
   * with the client: a layer above keeps its per-client state here, not in a registry of its own.
   */
  attached<T extends Attachment>(key: AttachmentKey<T, Client>): T {
    let a = this.attachments.get(key) as T | undefined;
    if (!a) this.attachments.set(key, (a = key.create(this)));
    return a;
  }

  /**
   * @internal Registers work that close() waits for, at most callTimeoutMs, before it ends the
   * streams: a delete that keeps trying in the background (a release whose first attempt failed).
   */
  finishBeforeClose(work: Promise<unknown>): void {
    this.finishing.add(work);
    void work.finally(() => this.finishing.delete(work)).catch(() => {});
  }

  private rememberUnsent(id: bigint): void {
    // Bounded: callers revoke right after a failed grant, which forgets the id again.
    if (this.unsentGrants.size >= 1024) this.unsentGrants.delete(this.unsentGrants.values().next().value!);
    this.unsentGrants.add(id);
  }

  private saw(h: ResponseHeader): ResponseHeader {
    if (h.revision > this.conn.seenRevision) this.conn.seenRevision = h.revision;
    this.conn.sawTerm(h.raftTerm);
    return h;
  }

  get closed(): boolean {
    return this.conn.isClosed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * `p`, or the signal's reason once it aborts; what `p` yields after that goes to `discard` (a
 * stream opened too late is closed, not leaked).
 */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal, discard: (late: T) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) discard(v);
        else resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

function isLeaseNotFound(err: unknown): boolean {
  return err instanceof LeaseNotFoundError;
}

function isAlreadyExists(err: unknown): boolean {
  const cause = err instanceof EtcdError ? err.cause : err;
  return isTransportError(cause) && etcdSays(cause.details, 'leaseExists');
}
