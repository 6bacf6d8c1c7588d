// The simulated network between client processes and members: one connection per Client and
// member (as the library's Http2Transport keeps), every message a timer on the virtual clock with
// a seeded latency, FIFO per stream and direction as HTTP/2 gives. Partitions drop what crosses
// them; a member's crash, a broken connection or a partition that outlasts the keepalive ends the
// connection's calls and streams as the real transport reports them.
import { EventEmitter } from 'node:events';
import * as pb from '../../proto/etcd.js';
import {
  type BidiStream,
  ConnectError,
  type Method,
  type RequestHeaders,
  Status,
  type Transport,
  TransportError,
} from '../../client/transport/transport.js';
import type { Cluster, Member, ServerStream } from './cluster.js';
import type { Rng } from './rng.js';
import { EtcdFailure } from './store.js';
import type { Proc, VirtualTime } from './time.js';
import type { Trace } from './trace.js';
import { asDecoded, roundTrip } from './wire.js';

interface Codec {
  readonly request: pb.MessageFns<unknown>;
  readonly response: pb.MessageFns<unknown>;
}

/** Every method's request and response codecs, by gRPC path. */
const CODECS = new Map<string, Codec>();
for (const def of [
  pb.KVDefinition,
  pb.WatchDefinition,
  pb.LeaseDefinition,
  pb.MaintenanceDefinition,
  pb.ClusterDefinition,
  pb.AuthDefinition,
]) {
  for (const m of Object.values(def.methods) as {
    name: string;
    requestType: pb.MessageFns<unknown>;
    responseType: pb.MessageFns<unknown>;
  }[]) {
    CODECS.set(`/${def.fullName}/${m.name}`, { request: m.requestType, response: m.responseType });
  }
}

/**
 * A request as the member reads it. The simulated server reads every field with its default, so
 * the library's own object will do, unless `exactRequests` (the differential test) asks for bytes.
 */
function asReceived<T>(fns: pb.MessageFns<unknown>, message: T): T {
  return exactRequests ? roundTrip(fns, message) : message;
}

let exactRequests = false;

/** Encode and decode requests too (answers always are). */
export function setExactRequests(on: boolean): void {
  exactRequests = on;
}

/** How the library's keepalive (6 s ping, 3 s timeout) notices a connection that went silent. */
const SILENT_CONNECTION_MS = 9000;
/** How long one dial keeps trying (the library's default dial timeout). */
const DIAL_MS = 2000;

export interface Link {
  /** Until when (virtual ms) traffic between the process and the member is dropped. */
  cutUntil: number;
}

/** The network: latencies, partitions, and the faults that act on connections. */
export class Network {
  private readonly links = new Map<string, Link>();
  readonly connections = new Set<Connection>();
  /** Processes whose next write is applied but its answer lost (unknown outcome), by name. */
  readonly loseNextAnswer = new Set<string>();
  /** Told when an answer to `proc` is lost (its connection reset), for the oracle. */
  onAnswerLost?: (proc: Proc) => void;
  /** Per-process extra latency on its streams' answers until a time (a stall). */
  private readonly stalls = new Map<string, number>();
  /** Per-process slow unary answers: until when, and up to how much longer each. */
  private readonly slow = new Map<string, { until: number; upTo: number }>();

  constructor(
    readonly cluster: Cluster,
    readonly time: VirtualTime,
    private readonly rng: Rng,
    readonly trace: Trace,
  ) {}

  /** One message's transit time: mostly a millisecond or two, sometimes more. */
  latency(): number {
    const r = this.rng.next();
    if (r < 0.8) return 1 + this.rng.int(2);
    if (r < 0.97) return 2 + this.rng.int(10);
    return 10 + this.rng.int(60);
  }

  link(proc: Proc, m: Member): Link {
    const k = `${proc.name}>${m.index}`;
    let l = this.links.get(k);
    if (!l) this.links.set(k, (l = { cutUntil: 0 }));
    return l;
  }

  /** Whether traffic between `proc` and `m` gets through now. */
  reachable(proc: Proc, m: Member): boolean {
    return m.up && !proc.crashed && performance.now() >= this.link(proc, m).cutUntil;
  }

  /**
   * Runs `f` on connection `c` when a message sent now arrives: after its latency, or, while a
   * partition cuts the link, once it heals (TCP resends; nothing is lost while the connection
   * lives). Nothing arrives on a connection that was dropped meanwhile.
   */
  arrive(c: Connection, at: number, f: () => void, toClient: boolean): void {
    const proc = toClient ? c.proc : undefined;
    this.time.after(proc, at - performance.now(), () => this.deliver(c, f, proc));
  }

  /** `arrive`'s delivery, at its time: held while the link is cut, dropped with the connection. */
  private deliver(c: Connection, f: () => void, proc: Proc | undefined): void {
    if (!c.open) return;
    const cut = c.link.cutUntil;
    if (performance.now() < cut) {
      // Resent once the link heals; messages held together keep their order.
      this.time.after(proc, cut - performance.now() + 1, () => this.deliver(c, f, proc));
      return;
    }
    f();
  }

  /** Cuts `proc` off from `m` for `ms`: nothing crosses, nothing closes (until the keepalive notices). */
  partition(proc: Proc, m: Member, ms: number): void {
    const l = this.link(proc, m);
    l.cutUntil = Math.max(l.cutUntil, performance.now() + ms);
    this.trace.add(`partition ${proc.name} from ${m.name} for ${ms} ms`);
    this.server(() =>
      setTimeout(() => {
        if (performance.now() >= l.cutUntil) return;
        for (const c of [...this.connections])
          if (c.proc === proc && c.member === m) c.drop('the connection was lost (keepalive ping timed out)');
      }, SILENT_CONNECTION_MS),
    );
  }

  /** Delays every stream answer to `proc` until `ms` from now. */
  stall(proc: Proc, ms: number): void {
    this.stalls.set(proc.name, performance.now() + ms);
    this.trace.add(`stall streams of ${proc.name} for ${ms} ms`);
  }

  stalledUntil(proc: Proc): number {
    return this.stalls.get(proc.name) ?? 0;
  }

  /**
   * For `ms`, each unary answer to `proc` (each call its own HTTP/2 stream, its answer written by a
   * handler of its own) waits up to `upTo` ms more, on its own: answers then come back in another
   * order than the member gave them. Its streams are not slowed.
   */
  slowAnswers(proc: Proc, upTo: number, ms: number): void {
    this.slow.set(proc.name, { until: performance.now() + ms, upTo });
    this.trace.add(`answers to ${proc.name} slow (up to ${upTo} ms) for ${ms} ms`);
  }

  /** The extra wait of a unary answer to `proc` sent now. */
  answerDelay(proc: Proc): number {
    const s = this.slow.get(proc.name);
    return s && performance.now() < s.until ? this.rng.int(s.upTo) : 0;
  }

  /**
   * The members cancel every watch of `proc` with a reason other than compaction, as a server of the
   * etcd API may (kine cancels a watch whose query to its database failed). The streams stay open.
   */
  cancelWatches(proc: Proc): void {
    this.trace.add(`watches of ${proc.name} cancelled`);
    for (const c of this.connections) {
      if (c.proc !== proc) continue;
      for (const s of c.streams) s.serverSide?.cancelAll?.('the server cancelled the watch');
    }
  }

  /** Ends every connection to `m` (it crashed). */
  dropMember(m: Member): void {
    for (const c of [...this.connections]) if (c.member === m) c.drop('the connection was lost (connection reset)');
  }

  /** Resets one connection of `proc` to `m` (a broken stream: every call and stream on it fails). */
  breakOne(proc: Proc, m: Member): void {
    for (const c of this.connections) {
      if (c.proc !== proc || c.member !== m) continue;
      this.trace.add(`connection of ${proc.name} to ${m.name} reset`);
      c.drop('the connection was lost (connection reset)');
      return;
    }
  }

  /** Ends every connection of `proc` (it crashed): the members see the streams close. */
  dropProc(proc: Proc): void {
    for (const c of [...this.connections]) if (c.proc === proc) c.drop('process crashed');
  }

  server<T>(fn: () => T): T {
    return this.time.as(undefined, fn);
  }

  /** A transport factory for a Client of `proc` (ClientOptions' internal `transport`). */
  transportFor(proc: Proc): (target: string) => Transport {
    return (target) => {
      const m = this.cluster.members.find((x) => x.endpoint === target);
      if (!m) throw new Error(`no simulated member at ${target}`);
      return new SimTransport(this, proc, m);
    };
  }
}

/** One connection between a Client and a member: its unary calls and streams in flight. */
export class Connection {
  open = true;
  readonly calls = new Set<PendingCall>();
  readonly streams = new Set<SimStream<unknown, unknown>>();
  /** The path between the two (a partition cuts it). */
  readonly link: Link;

  constructor(
    readonly net: Network,
    readonly proc: Proc,
    readonly member: Member,
  ) {
    net.connections.add(this);
    this.link = net.link(proc, member);
  }

  /** The connection is gone: calls and streams fail as the transport reports a lost connection. */
  drop(why: string): void {
    if (!this.open) return;
    this.open = false;
    this.net.connections.delete(this);
    const calls = [...this.calls];
    const streams = [...this.streams];
    this.calls.clear();
    this.streams.clear();
    for (const s of streams) s.serverSide?.close();
    if (this.proc.crashed) return;
    this.proc.run(() =>
      setTimeout(() => {
        for (const c of calls) c.fail(new TransportError(Status.UNAVAILABLE, why));
        for (const s of streams) s.fail(new TransportError(Status.UNAVAILABLE, why));
      }, this.net.latency()),
    );
  }
}

interface PendingCall {
  fail(err: TransportError): void;
}

/**
 * One unary call in flight: its deadline, its abort, its trip to the member and its answer's back.
 * It settles once: answered, failed, timed out or aborted, whichever comes first.
 */
class UnaryCall<Res> implements PendingCall {
  private settled = false;
  private sent = false;
  private conn: Connection | undefined;
  private readonly timer: ReturnType<typeof setTimeout>;
  private readonly codec: Codec;

  constructor(
    private readonly net: Network,
    private readonly proc: Proc,
    private readonly member: Member,
    private readonly path: string,
    private readonly request: unknown,
    private readonly headers: RequestHeaders,
    deadline: number,
    private readonly signal: AbortSignal | undefined,
    private readonly resolve: (res: Res) => void,
    private readonly rejectWith: (err: unknown) => void,
  ) {
    this.codec = CODECS.get(path)!;
    this.timer = setTimeout(() => this.expire(), Math.max(0, deadline - performance.now()));
    signal?.addEventListener('abort', this, { once: true });
  }

  /** The deadline passed. */
  private expire(): void {
    this.reject(
      this.sent
        ? new TransportError(Status.DEADLINE_EXCEEDED, 'no answer within the deadline')
        : new TransportError(Status.DEADLINE_EXCEEDED, 'the deadline passed while connecting', { notSent: true }),
    );
  }

  /** The signal aborted (an EventListener object: no closure per call). */
  handleEvent(): void {
    this.reject(new TransportError(Status.CANCELLED, 'cancelled', { local: true, notSent: !this.sent }));
  }

  /** The connection failed it. */
  fail(err: TransportError): void {
    this.reject(err);
  }

  reject(err: unknown): void {
    if (this.finish()) this.rejectWith(err);
  }

  /** Whether this is the first outcome; clears what the call holds. */
  private finish(): boolean {
    if (this.settled) return false;
    this.settled = true;
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this);
    this.conn?.calls.delete(this);
    return true;
  }

  send(c: Connection): void {
    if (this.settled) return;
    if (!c.open) return this.reject(new TransportError(Status.UNAVAILABLE, 'no connection', { notSent: true }));
    this.conn = c;
    this.sent = true;
    c.calls.add(this);
    const body = asReceived(this.codec.request, this.request);
    this.net.arrive(c, performance.now() + this.net.latency(), () => this.serve(c, body), false);
  }

  /** At the member: the answer (or error) goes back, unless the fault of a lost answer takes it. */
  private serve(c: Connection, body: unknown): void {
    const { net, proc, member, path } = this;
    if (!member.up) return;
    const what = path.slice(path.lastIndexOf('/') + 1);
    let res: unknown;
    let err: EtcdFailure | undefined;
    try {
      res = net.cluster.unary(member, path, body, this.headers.hasleader === 'true', `${proc.name} ${what}`);
    } catch (e) {
      if (!(e instanceof EtcdFailure)) throw e;
      err = e;
    }
    net.trace.add(`${proc.name} ${what} at ${member.name}: ${err ? err.details : 'ok'}`);
    if (net.loseNextAnswer.delete(proc.name) && isWrite(what)) {
      net.trace.add(`answer to ${proc.name} lost`);
      net.onAnswerLost?.(proc);
      c.drop('the connection was lost (connection reset)');
      return;
    }
    const out = res === undefined ? undefined : asDecoded(this.codec.response, res);
    net.arrive(
      c,
      performance.now() + net.latency() + net.answerDelay(proc),
      () => {
        if (out !== undefined) {
          if (this.finish()) this.resolve(out as Res);
        } else this.reject(new TransportError(err!.code, err!.details, { fromServer: true }));
      },
      true,
    );
  }
}

/** What carries a Client's calls to one simulated member. */
export class SimTransport implements Transport {
  private conn: Connection | undefined;
  private dialing: Promise<Connection | undefined> | undefined;
  private closed = false;

  constructor(
    private readonly net: Network,
    private readonly proc: Proc,
    private readonly member: Member,
  ) {}

  get isReady(): boolean {
    return this.conn?.open === true;
  }

  connect(deadline: number, signal?: AbortSignal): Promise<void> {
    return this.ready(deadline, signal).then(() => undefined);
  }

  /** A connection, dialled when there is none; a member that is down or cut off never answers the dial. */
  private ready(deadline: number, signal?: AbortSignal): Promise<Connection> {
    if (this.closed) return Promise.reject(new ConnectError('closed', 0));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.conn?.open) return Promise.resolve(this.conn);
    const started = performance.now();
    const dial = (this.dialing ??= this.dial());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new ConnectError('timeout', Math.max(0, deadline - started))), Math.max(0, deadline - started));
      const onAbort = (): void => finish(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      let done = false;
      const finish = (err: unknown, c?: Connection): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (c) resolve(c);
        else reject(err);
      };
      void dial.then((c) => finish(c ? undefined : new ConnectError('timeout', performance.now() - started), c));
    });
  }

  /** One dial: the handshake's round trip, SYNs resent every 250 ms for up to DIAL_MS; undefined when nothing answered. */
  private dial(): Promise<Connection | undefined> {
    const until = performance.now() + DIAL_MS;
    return new Promise((resolve) => {
      const settle = (c: Connection | undefined): void => {
        this.dialing = undefined;
        resolve(c);
      };
      const attempt = (): void => {
        setTimeout(() => {
          if (this.closed || this.proc.crashed) return settle(undefined);
          if (this.net.reachable(this.proc, this.member)) {
            this.conn = new Connection(this.net, this.proc, this.member);
            return settle(this.conn);
          }
          if (performance.now() + 250 >= until) return settle(undefined);
          setTimeout(attempt, 250);
        }, 2 * this.net.latency());
      };
      attempt();
    });
  }

  unary<Req, Res>(method: Method<Req, Res>, request: Req, headers: RequestHeaders, deadline: number, signal?: AbortSignal): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      if (signal?.aborted) return reject(new TransportError(Status.CANCELLED, 'cancelled', { notSent: true, local: true }));
      const call = new UnaryCall<Res>(this.net, this.proc, this.member, method.path, request, headers, deadline, signal, resolve, reject);
      if (this.conn?.open) return call.send(this.conn);
      if (this.closed) return call.reject(new TransportError(Status.UNAVAILABLE, 'the transport is closed', { notSent: true }));
      this.ready(deadline, signal).then(
        (c) => call.send(c),
        (err: unknown) => {
          if (err instanceof ConnectError && err.kind === 'timeout' && performance.now() >= deadline - 1)
            return call.reject(new TransportError(Status.DEADLINE_EXCEEDED, 'the deadline passed while connecting', { notSent: true }));
          const why = err instanceof Error ? err.message : String(err);
          call.reject(new TransportError(Status.UNAVAILABLE, `no connection: ${why}`, { notSent: true, cause: err }));
        },
      );
    });
  }

  stream<Req, Res>(method: Method<Req, Res>, headers: RequestHeaders): BidiStream<Req, Res> {
    const s = new SimStream<Req, Res>(this.net, this.proc, this.member, method.path);
    const c = this.conn;
    if (!c?.open) {
      process.nextTick(() => s.fail(new TransportError(Status.UNAVAILABLE, 'no connection', { notSent: true })));
      return s;
    }
    s.attach(c, headers.hasleader === 'true');
    return s;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const c = this.conn;
    this.conn = undefined;
    // Calls in flight finish; the connection closes once idle.
    if (c && c.calls.size === 0 && c.streams.size === 0) {
      c.open = false;
      this.net.connections.delete(c);
    }
  }
}

function isWrite(what: string): boolean {
  return what === 'Txn' || what === 'Put' || what === 'DeleteRange' || what === 'LeaseGrant' || what === 'LeaseRevoke';
}

/** A bidi stream over the simulated network: writes reach the member in order, answers come back in order. */
export class SimStream<Req, Res> extends EventEmitter implements BidiStream<Req, Res> {
  private conn: Connection | undefined;
  serverSide: ServerStream<Req> | undefined;
  private done = false;
  private toServerAt = 0;
  private toClientAt = 0;
  private readonly codec: Codec;

  constructor(
    private readonly net: Network,
    private readonly proc: Proc,
    private readonly member: Member,
    path: string,
  ) {
    super();
    this.codec = CODECS.get(path)!;
    this.path = path;
  }

  private readonly path: string;

  /** The method's name: `Watch` or `LeaseKeepAlive`. */
  get method(): string {
    return this.path.slice(this.path.lastIndexOf('/') + 1);
  }

  attach(c: Connection, hasLeader: boolean): void {
    this.conn = c;
    c.streams.add(this as SimStream<unknown, unknown>);
    const cluster = this.net.cluster;
    const sink = {
      send: (res: Res) => this.toClient(undefined, res),
      fail: (err: EtcdFailure) => this.toClient(() => this.end(new TransportError(err.code, err.details, { fromServer: true }))),
    };
    // The stream opens at the member after one transit.
    this.toServer(() => {
      this.serverSide = (
        this.path.endsWith('/Watch')
          ? cluster.openWatch(this.member, hasLeader, sink as never)
          : cluster.openKeepAlive(this.member, hasLeader, sink as never)
      ) as ServerStream<Req>;
    });
  }

  /** Delivers `f` at the member after one transit, after everything written before it. */
  private toServer(f: () => void): void {
    const c = this.conn!;
    const at = Math.max(performance.now() + this.net.latency(), this.toServerAt);
    this.toServerAt = at;
    this.net.arrive(
      c,
      at,
      () => {
        if (!this.done && this.member.up) f();
      },
      false,
    );
  }

  /** Delivers `f` at the client after one transit (and any stall), after every earlier answer. */
  private toClient(f: (() => void) | undefined, res?: Res): void {
    const c = this.conn!;
    const msg = res === undefined ? undefined : asDecoded(this.codec.response, res);
    const at = Math.max(performance.now() + this.net.latency(), this.toClientAt, this.net.stalledUntil(this.proc));
    this.toClientAt = at;
    this.net.arrive(
      c,
      at,
      () => {
        if (this.done) return;
        if (f) f();
        else this.emit('data', msg);
      },
      true,
    );
  }

  write(message: Req): boolean {
    return this.writeMany([message]);
  }

  writeMany(messages: readonly Req[]): boolean {
    if (this.done || !this.conn) return false;
    for (const m of messages) {
      const body = asReceived(this.codec.request, m);
      this.toServer(() => this.serverSide?.receive(body));
    }
    return true;
  }

  cancel(): void {
    if (this.done) return;
    this.done = true;
    this.detach();
  }

  private detach(): void {
    const c = this.conn;
    const server = this.serverSide;
    if (c) c.streams.delete(this as SimStream<unknown, unknown>);
    // The member learns of the reset one transit later (one still opening never opens: `done`).
    if (server) this.net.server(() => setTimeout(() => server.close(), this.net.latency()));
  }

  /** The stream failed (connection lost, server error). */
  fail(err: TransportError): void {
    this.end(err);
  }

  private end(err: TransportError): void {
    if (this.done) return;
    this.done = true;
    this.detach();
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }
}
