// `inspect --web`: one prefix watch on etcd feeds every browser through server-sent events. The
// server keeps the picture (model.ts), fetches a lease's TimeToLive when the lease appears, when its
// keys change, and, for holders only, every sixth of its TTL while its keys are still there (it is
// renewed every third); the page counts the time down itself. Read-only: nothing here writes.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { CompactedError, PermissionDeniedError, prefixRange, SortOrder, SortTarget, type Client, type KeyValue } from '../../index.js';
import { electionMatcher, Model } from './model.js';
import type { Change } from './views.js';
import { PAGE_CSS, PAGE_HTML, pageScript } from './page.js';

export interface InspectorOptions {
  /** Key prefix to show ('' for every key). */
  prefix: string;
  host: string;
  port: number;
  /** Send key values (labels, proposals) to the page; they may hold data. */
  showValues: boolean;
  /** How often the server checks that etcd answers, ms (default 2000). */
  probeMs?: number;
  /** Globs of the names that are elections (`--elections`; see electionMatcher). */
  elections?: readonly string[];
}

/** A lease's TimeToLive as last fetched: `ttl` seconds left at wall-clock `at` ms (-1: gone). */
interface LeaseInfo {
  ttl: number;
  granted: number;
  at: number;
}

/** At most this many TimeToLive calls in flight. */
const LEASE_CONCURRENCY = 8;
/** A page whose connection buffers more than this is cut off; it reconnects and gets a snapshot. */
const MAX_BUFFERED = 8 * 1024 * 1024;
/** Live pages (open /events streams) served at once; past it a 503. Each may buffer MAX_BUFFERED. */
const MAX_PAGES = 32;

/** Whether `host` is a loopback address or name. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host) || host === '::ffff:127.0.0.1';
}

/**
 * Which Host headers the server answers, bound to `host` on `port`: a page of another site whose own
 * name was made to resolve to this server (DNS rebinding) sends that name, so names are checked.
 * On loopback, the loopback addresses and `localhost` with the port; on one other address, that
 * address or name (any port: a proxy or a port mapping may stand in front); on every address
 * (`0.0.0.0`, `::`), any IP address, `localhost` and this machine's host name.
 */
function hostCheck(host: string, port: number): { allows(header: string): boolean; refusal: string } {
  if (isLoopback(host)) {
    const shown = host.includes(':') ? `[${host}]` : host;
    const allowed = new Set([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, `${shown}:${port}`]);
    return { allows: (h) => allowed.has(h), refusal: 'forbidden: this inspector answers only to its loopback address\n' };
  }
  /** The name or address of a Host header, without its port and brackets, in lower case. */
  const nameOf = (h: string): string => (/^\[([^\]]+)\](?::\d+)?$/.exec(h)?.[1] ?? h.replace(/:\d+$/, '')).toLowerCase();
  if (host === '0.0.0.0' || host === '::') {
    const names = new Set(['localhost', hostname().toLowerCase()]);
    return {
      allows: (h) => isIP(nameOf(h)) !== 0 || names.has(nameOf(h)),
      refusal:
        `forbidden: this inspector answers to IP addresses and to ${[...names].join(' and ')} only; ` +
        `to reach it by another name, listen on that name (--listen <name>:${port})\n`,
    };
  }
  const bound = nameOf(host.includes(':') ? `[${host}]` : host);
  return {
    allows: (h) => nameOf(h) === bound,
    refusal: `forbidden: this inspector answers to ${host} only (--listen); a page of another site cannot reach it through its own name\n`,
  };
}

/** An error's message without anything that looks like a credential (userinfo in URLs). */
function safeMessage(err: unknown): string {
  const m = err instanceof Error ? err.message : String(err);
  return m
    .replace(/\/\/[^/@\s]+@/g, '//')
    .replace(/\s*\n\s*/g, ' ')
    .slice(0, 300);
}

export class Inspector {
  readonly model: Model;
  private readonly server: Server;
  private readonly pages = new Set<ServerResponse>();
  private readonly stop = new AbortController();
  /** Aborted to make the sync loop drop its watch and read afresh. */
  private resyncNow = new AbortController();
  private readonly leases = new Map<string, LeaseInfo>();
  private readonly leaseQueue: string[] = [];
  private readonly leaseQueued = new Set<string>();
  /** Leases whose TimeToLive failed (etcd out of reach): asked again once it is back. */
  private readonly leaseFailed = new Set<string>();
  private leaseInflight = 0;
  private connected = false;
  private lastError: string | undefined;
  private revision = 0n;
  private readonly timers: NodeJS.Timeout[] = [];
  private loop?: Promise<void>;
  private probeWithRange = false;
  private probing = false;
  private hosts: ReturnType<typeof hostCheck> | undefined;
  /** Resolves when the first page connects (the demo waits for one before it starts). */
  readonly firstPage: Promise<void>;
  private onFirstPage!: () => void;
  /** Counters, for the scale measurement and for tests. */
  readonly stats = { events: 0, batches: 0, resyncs: 0, leaseCalls: 0, messages: 0 };

  constructor(
    private readonly client: Client,
    private readonly options: InspectorOptions,
  ) {
    this.model = new Model(options.prefix, options.showValues, Date.now, electionMatcher(options.elections ?? []));
    this.firstPage = new Promise((resolve) => (this.onFirstPage = resolve));
    this.server = createServer((req, res) => this.handle(req, res));
  }

  /** Reads the prefix once (a wrong endpoint fails here), starts the watch, then listens. Returns the page's URL. */
  async start(): Promise<string> {
    const first = await this.read();
    this.applyResync(first.kvs, true);
    this.revision = first.revision;
    this.setConnected(true);
    this.loop = this.sync(first.revision).catch(() => {});
    const probeMs = this.options.probeMs ?? 2000;
    this.timers.push(setInterval(() => void this.probe(probeMs), probeMs));
    this.timers.push(setInterval(() => this.refreshDueLeases(), 1000));
    // A comment line now and then keeps proxies from closing an idle stream and lets the page
    // notice a dead connection.
    this.timers.push(setInterval(() => this.sendRaw(': ping\n\n'), 15_000));
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, this.options.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const { port } = this.server.address() as AddressInfo;
    const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    this.hosts = hostCheck(this.options.host, port);
    return `http://${host}:${port}/`;
  }

  /** Stops the watch, ends every page's connection, closes the server. */
  async close(): Promise<void> {
    this.stop.abort();
    this.resyncNow.abort();
    for (const t of this.timers) clearInterval(t);
    for (const res of this.pages) res.end();
    this.pages.clear();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
    await this.loop;
  }

  // ── etcd ─────────────────────────────────────────────────────────────────────────────────────

  private async read(): Promise<{ kvs: KeyValue[]; revision: bigint }> {
    const { key, rangeEnd } = prefixRange(this.options.prefix);
    const r = await this.client.range(
      { key, rangeEnd, sortOrder: SortOrder.ASCEND, sortTarget: SortTarget.CREATE },
      { signal: this.stop.signal },
    );
    return { kvs: r.kvs, revision: r.header.revision };
  }

  /**
   * The one watch. It resumes by itself over a stream drop; after a compaction, an error, or an
   * outage the server noticed, it reads the prefix afresh and watches from there, as observe() does.
   */
  private async sync(fromRevision: bigint): Promise<void> {
    let revision = fromRevision;
    let failures = 0;
    while (!this.stop.signal.aborted) {
      const round = this.resyncNow.signal;
      try {
        if (revision === 0n) {
          const r = await this.read();
          this.stats.resyncs++;
          this.applyResync(r.kvs, false);
          revision = r.revision;
          this.revision = r.revision;
          this.setConnected(true);
        }
        const signal = AbortSignal.any([this.stop.signal, round]);
        const w = this.client.watch(this.options.prefix, { prefix: true, startRevision: revision + 1n, signal });
        for await (const batch of w) {
          failures = 0;
          this.stats.batches++;
          this.stats.events += batch.events.length;
          const last = batch.events[batch.events.length - 1]!.kv.modRevision;
          if (last > this.revision) this.revision = last;
          revision = this.revision;
          this.publish(this.model.apply(batch.events, (hex) => this.leaseExpired(hex)));
          if (!this.connected) this.setConnected(true);
        }
        // Ended without error: stopping, or asked to read afresh.
        revision = 0n;
      } catch (err) {
        if (this.stop.signal.aborted) return;
        revision = 0n;
        if (!(err instanceof CompactedError)) {
          this.setConnected(false, err);
          await delay(Math.min(200 * 2 ** failures++, 5000), undefined, { signal: this.stop.signal }).catch(() => {});
        }
      } finally {
        if (round.aborted && !this.stop.signal.aborted) this.resyncNow = new AbortController();
      }
    }
  }

  /** Asks etcd whether it answers; a change of state is told to the pages. */
  private async probe(timeoutMs: number): Promise<void> {
    if (this.probing || this.stop.signal.aborted) return;
    this.probing = true;
    try {
      if (this.probeWithRange) {
        const { key, rangeEnd } = prefixRange(this.options.prefix);
        await this.client.range({ key, rangeEnd, limit: 1n, countOnly: true }, { timeoutMs, signal: this.stop.signal });
      } else {
        const s = await this.client.status({ timeoutMs, signal: this.stop.signal });
        if (s.leader === 0n) throw new Error('the etcd member has no leader (cut off from its cluster?)');
      }
      if (!this.connected) {
        // Back: read afresh, so that what happened meanwhile (expired leases) shows at once.
        this.setConnected(true);
        this.resyncNow.abort();
      }
    } catch (err) {
      if (this.stop.signal.aborted) return;
      if (err instanceof PermissionDeniedError && !this.probeWithRange) {
        this.probeWithRange = true;
        return;
      }
      this.setConnected(false, err);
    } finally {
      this.probing = false;
    }
  }

  private setConnected(on: boolean, err?: unknown): void {
    const error = on ? undefined : safeMessage(err);
    if (on === this.connected && error === this.lastError) return;
    if (on && !this.connected) {
      // Back (the probe or the watch noticed first). Asked again: the holders' leases (renewed or
      // not meanwhile, as at rest) and those whose call failed; not every known lease. Keys that
      // changed meanwhile come with the fresh read (new leases, a new holder's).
      for (const hex of this.model.holderLeases()) this.queueLease(hex, true);
      for (const hex of this.leaseFailed) this.queueLease(hex);
      this.leaseFailed.clear();
    }
    this.connected = on;
    this.lastError = error;
    this.send('status', this.status());
  }

  private status(): { now: number; connected: boolean; error?: string; revision: string } {
    return {
      now: Date.now(),
      connected: this.connected,
      ...(this.lastError ? { error: this.lastError } : {}),
      revision: this.revision.toString(),
    };
  }

  /** Wall-clock ms when the inspector first read the prefix: keys older than that show as "≥". */
  private readonly startedAt = Date.now();

  private applyResync(kvs: KeyValue[], initial: boolean): void {
    this.publish(this.model.resync(kvs, initial, (hex) => this.leaseExpired(hex)));
  }

  // ── leases ───────────────────────────────────────────────────────────────────────────────────

  /** Whether the lease's known deadline has passed: a key leaving now went with its lease. */
  private leaseExpired(hex: string): boolean {
    const l = this.leases.get(hex);
    return l !== undefined && (l.ttl < 0 || Date.now() >= l.at + l.ttl * 1000 - 250);
  }

  private queueLease(hex: string, first = false): void {
    if (this.leaseQueued.has(hex)) return;
    this.leaseQueued.add(hex);
    if (first) this.leaseQueue.unshift(hex);
    else this.leaseQueue.push(hex);
    this.pumpLeases();
  }

  private pumpLeases(): void {
    while (this.leaseInflight < LEASE_CONCURRENCY && this.leaseQueue.length > 0 && !this.stop.signal.aborted) {
      const hex = this.leaseQueue.shift()!;
      this.leaseQueued.delete(hex);
      if (!this.model.hasLease(hex)) continue;
      this.leaseInflight++;
      this.stats.leaseCalls++;
      this.client
        .leaseTimeToLive(BigInt(`0x${hex}`), { signal: this.stop.signal })
        .then(
          (t) => {
            this.leaseFailed.delete(hex);
            if (!this.model.hasLease(hex)) return;
            const info = { ttl: t.ttl, granted: t.grantedTtl, at: Date.now() };
            this.leases.set(hex, info);
            this.send('leases', { now: Date.now(), leases: { [hex]: info } });
          },
          () => {
            // etcd unreachable: the probe says so; the lease is asked again once it is back.
            if (this.model.hasLease(hex) && !this.stop.signal.aborted) this.leaseFailed.add(hex);
          },
        )
        .finally(() => {
          this.leaseInflight--;
          this.pumpLeases();
        });
    }
  }

  /**
   * Holders' leases, asked again every sixth of their TTL while their keys are there: a live holder
   * renews every third of its TTL (ours, Go's and etcdctl's sessions), so what the page counts down
   * stays what etcd has (a healthy holder never counts down into the warning; a holder that stopped
   * renewing shows it within a sixth of its TTL), and a holder's known deadline that passes means
   * its lease expired. Waiters' leases are not asked again (their countdown ends at "renewed, ≤
   * TTL"): the cost is six calls per holder per TTL, however long the queue.
   */
  private refreshDueLeases(): void {
    if (!this.connected) return;
    const now = Date.now();
    for (const hex of this.model.holderLeases()) {
      const l = this.leases.get(hex);
      if (l && l.ttl >= 0 && now >= l.at + Math.max(1, l.granted / 6) * 1000) this.queueLease(hex, true);
    }
  }

  // ── pages ────────────────────────────────────────────────────────────────────────────────────

  /** Sends one change to every page, and queues the TimeToLive calls it needs. */
  private publish(ch: Change): void {
    const gone: Record<string, null> = {};
    for (const hex of ch.leasesGone) {
      this.leases.delete(hex);
      this.leaseFailed.delete(hex);
      gone[hex] = null;
    }
    for (const hex of ch.leasesNew) this.queueLease(hex, true);
    for (const hex of ch.leasesChanged) this.queueLease(hex);
    // A new holder's lease may have been renewed since it was fetched: its deadline matters now.
    for (const ev of ch.timeline) if (ev.type === 'acquired' && !ch.leasesNew.includes(ev.lease)) this.queueLease(ev.lease, true);
    if (ch.parts.length === 0 && ch.entities.length === 0 && ch.timeline.length === 0 && ch.dropped.length === 0) return;
    this.send('update', { now: Date.now(), revision: this.revision.toString(), ...ch, leases: gone });
  }

  private snapshot(): object {
    const snap = this.model.snapshot();
    return {
      ...this.status(),
      startedAt: this.startedAt,
      prefix: this.options.prefix,
      showValues: this.options.showValues,
      entities: snap.entities,
      timeline: snap.timeline,
      leases: Object.fromEntries(snap.leases.flatMap((hex) => (this.leases.has(hex) ? [[hex, this.leases.get(hex)!]] : []))),
    };
  }

  private send(event: string, data: object): void {
    if (this.pages.size === 0) return;
    this.stats.messages++;
    this.sendRaw(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  private sendRaw(text: string): void {
    for (const res of this.pages) {
      if (res.writableLength > MAX_BUFFERED) {
        // Too slow to keep up: it reconnects and starts from a snapshot.
        res.destroy();
        this.pages.delete(res);
        continue;
      }
      res.write(text);
    }
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const security = {
      'Content-Security-Policy':
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    };
    // A page on another site must not reach us through a DNS name rebound to our address.
    if (!this.hosts?.allows(req.headers.host ?? '')) {
      res.writeHead(403, { ...security, 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(this.hosts?.refusal ?? 'forbidden: not listening yet\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { ...security, Allow: 'GET, HEAD', 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('read-only\n');
      return;
    }
    const path = (req.url ?? '/').split('?', 1)[0];
    const body = (type: string, text: string): void => {
      res.writeHead(200, { ...security, 'Content-Type': type });
      res.end(req.method === 'HEAD' ? undefined : text);
    };
    switch (path) {
      case '/':
        return body('text/html; charset=utf-8', PAGE_HTML);
      case '/app.js':
        return body('text/javascript; charset=utf-8', pageScript('app.js'));
      case '/words.js':
        return body('text/javascript; charset=utf-8', pageScript('words.js'));
      case '/app.css':
        return body('text/css; charset=utf-8', PAGE_CSS);
      case '/state':
        return body('application/json; charset=utf-8', JSON.stringify(this.snapshot()));
      case '/events': {
        if (this.pages.size >= MAX_PAGES && req.method === 'GET') {
          res.writeHead(503, { ...security, 'Content-Type': 'text/plain; charset=utf-8', 'Retry-After': '10' });
          res.end(
            `too many live pages: ${this.pages.size} are open, the most this inspector serves; close one, or run another inspector\n`,
          );
          return;
        }
        res.writeHead(200, { ...security, 'Content-Type': 'text/event-stream; charset=utf-8', Connection: 'keep-alive' });
        if (req.method === 'HEAD') return void res.end();
        res.socket?.setNoDelay(true);
        res.write(`retry: 1000\nevent: snapshot\ndata: ${JSON.stringify(this.snapshot())}\n\n`);
        this.pages.add(res);
        this.onFirstPage();
        const drop = (): void => void this.pages.delete(res);
        req.on('close', drop);
        res.on('error', drop);
        return;
      }
      default:
        res.writeHead(404, { ...security, 'Content-Type': 'text/plain; charset=utf-8' });
        res.end('not found\n');
    }
  }
}
