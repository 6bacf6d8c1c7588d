// `etcd-concurrency inspect <name>`: who holds a lock, semaphore or readers-writer lock (or leads an
// election) and who waits, in order.
import { spawn, spawnSync } from 'node:child_process';
import { COMMON, COMMON_HELP, connectTo, nameArg, parse } from './options.js';
import { CliError, EXIT, print, printJson, UsageError, warn } from './output.js';
import { nameView, prefixView, renderName, renderPrefix, type NameView } from './snapshot.js';
import { firstAborted, Interrupts } from './signals.js';
import { METRICS_HELP, startMetrics } from './metrics.js';
import { Inspector, isLoopback } from './web/server.js';

/** The web inspector's port when neither --port nor --listen says otherwise. */
export const WEB_PORT = 8379;

export const INSPECT_HELP = `Usage: etcd-concurrency inspect <name> [options]
       etcd-concurrency inspect <prefix>/ [options]
       etcd-concurrency inspect --web [prefix] [--port N] [--open] [--hide-values] [--elections <glob>]

Shows the owner of lock or election <name> (the participant with the oldest key) and the queue
behind it in order: for a semaphore (\`lock --limit\`) its permit holders, for a readers-writer
lock (\`lock --read/--write\`, Go's recipe.RWMutex) its readers or writer, for a double barrier
its members. For each participant: its key, lease id (hex), the lease's remaining and granted
TTL, its fencing token (the key's CreateRevision) and its age in revisions. Then the names nested
under <name>/ (e.g. <name>/deploy), each the same way. With a trailing slash (\`inspect jobs/\`):
every name under that prefix.

A key in a participant's place without a lease shows as "stray": written without one (an
operator's \`etcdctl put\` over a holder's key keeps its place and drops its lease), it holds
nothing, nobody waits for it, and it stays until deleted (\`etcdctl del <key>\`).

etcd stores no timestamps, so how long a participant has waited is unknown. AGE is the number of
revisions (writes anywhere in the cluster) since its key was created: it orders participants and
grows with traffic, but it is not a duration. TTL is the time left before the lease would expire
without renewal (live holders renew every TTL/3), also unrelated to waiting time.

Options:
  --json                  print {"name","kind","revision","owner","holders":[...],"waiting":[...],
                          "stray":[...],"nested":[...]} as one JSON line (kind: lock, semaphore with
                          "permits", rwlock or barrier; nested: the names under <name>/, alike);
                          for a prefix {"prefix","revision","names":[...]}
  -w, --watch             print again on every change under <name>/ (or the prefix) until
                          interrupted
With --watch:
${METRICS_HELP}
                          plus etcd_concurrency.inspect.holders and .waiting: the participants
                          of <name> as last seen (attribute etcd_concurrency.name)

Web inspector (--web): a live page of every lock, semaphore, readers-writer lock and election
under [prefix] (default: every key): holders and waiters in queue order with their fencing tokens,
each lease's time left, how long each has held or waited, and a timeline of hand-overs and terms.
One watch on etcd feeds every open page; it only reads. Until interrupted.
  --web                   serve the page (prints its URL)
  --port <n>              port on 127.0.0.1 (default ${WEB_PORT}; 0 picks a free one)
  --listen <host:port>    listen on another address, e.g. 0.0.0.0:${WEB_PORT} (warns: anyone who
                          can reach it sees the names and leases; there is no login); it answers
                          requests addressed to that address or name (on 0.0.0.0: to IP addresses
                          and this host's name), against DNS rebinding; at most 32 live pages
  --open                  open the page in a browser (xdg-open), else print how to
  --hide-values           do not show the keys' values (labels, proposals), which may hold data;
                          shown by default on loopback, hidden by default with --listen elsewhere
  --show-values           show them with --listen on a non-loopback address too
  --elections <glob>      names that are elections (repeatable, or a comma list), matched against
                          the whole name: * any run but /, ** any run, ? one character but /;
                          e.g. --elections 'jobs/scheduler,**/leader-*'. Other names with the
                          <name>/<lease> layout: an election once a candidate proclaims (a new
                          value on its key); else a semaphore when every value starts with the
                          same number; else an election when the name contains "elect" or
                          "leader"; else a lock when every value is a lock's (empty, or the
                          CLI's <host>:<pid>); else "lock or election": the keys cannot tell
                          (docs/cli.md)

${COMMON_HELP}

Exit status: 0 ok (also after an interrupt with --watch); 2 bad usage; 1 any other error.

Examples:
  etcd-concurrency inspect jobs/nightly
  etcd-concurrency inspect jobs/nightly --json | jq -r .owner.key
  etcd-concurrency inspect jobs/
  etcd-concurrency inspect --web jobs/ --open`;

export async function inspectCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    ...COMMON,
    json: { type: 'boolean' },
    watch: { type: 'boolean', short: 'w' },
    web: { type: 'boolean' },
    port: { type: 'string' },
    listen: { type: 'string' },
    open: { type: 'boolean' },
    'show-values': { type: 'boolean' },
    'hide-values': { type: 'boolean' },
    elections: { type: 'string', multiple: true },
    metrics: { type: 'string' },
  });
  if (values.help) {
    print(INSPECT_HELP);
    return EXIT.ok;
  }
  if (values.web) {
    if (values.metrics !== undefined) throw new UsageError('--metrics only applies with --watch, not with --web');
    return web(values, positionals);
  }
  for (const flag of ['port', 'listen', 'open', 'show-values', 'hide-values', 'elections'] as const) {
    if (values[flag] !== undefined) throw new UsageError(`--${flag} only applies with --web`);
  }
  if (values.metrics !== undefined && !values.watch)
    throw new UsageError('--metrics only applies with --watch (a one-shot inspect has nothing to serve)');
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}" (inspect takes one name or prefix)`);
  // `jobs/` (a trailing slash): every name under the prefix; `jobs`: that name and those under jobs/.
  const prefix = positionals[0]?.endsWith('/') ? prefixArg(positionals[0]) : undefined;
  const name = prefix ?? nameArg(positionals[0], 'name');
  if (prefix !== undefined && values.metrics !== undefined)
    throw new UsageError('--metrics follows one name, not a prefix (its series carry the name): inspect a name');
  const json = values.json ?? false;
  const metrics = values.metrics === undefined ? undefined : await startMetrics(values.metrics);
  // One name per process: a bounded attribute, so the series carry it.
  const client = await connectTo(values, metrics ? { meterProvider: metrics.meterProvider, nameAttribute: true } : {}).catch(
    async (err: unknown) => {
      await metrics?.close();
      throw err;
    },
  );
  let last: NameView | undefined;
  if (metrics) {
    const meter = metrics.meterProvider.getMeter('etcd-concurrency');
    const attrs = { 'etcd_concurrency.name': name };
    meter
      .createObservableGauge('etcd_concurrency.inspect.holders', {
        unit: '{participant}',
        description:
          'Participants of the inspected name that hold it (lock owner, leader, permit holders, readers or writer), as last seen',
      })
      .addCallback((o) => {
        if (last) o.observe(last.holders.length, attrs);
      });
    meter
      .createObservableGauge('etcd_concurrency.inspect.waiting', {
        unit: '{participant}',
        description: 'Participants of the inspected name queued behind its holders, as last seen',
      })
      .addCallback((o) => {
        if (last) o.observe(last.waiting.length, attrs);
      });
  }
  const interrupts = new Interrupts();
  try {
    const show = async (): Promise<void> => {
      let lines: string[];
      if (prefix !== undefined) {
        const view = await prefixView(client, prefix, interrupts.signal);
        if (json) return printJson(view);
        lines = renderPrefix(view);
      } else {
        const view = await nameView(client, name, interrupts.signal);
        last = view;
        if (json) return printJson(view);
        lines = renderName(view);
      }
      // A terminal gets a fresh screen per refresh; a pipe or file gets blocks separated by a blank line.
      if (values.watch && process.stdout.isTTY) process.stdout.write('\x1b[2J\x1b[H');
      for (const line of lines) print(line);
      if (values.watch && !process.stdout.isTTY) print('');
    };
    if (!values.watch) {
      await show();
      return EXIT.ok;
    }
    // Watch first, read second: a change between the two is then both in the read and an event.
    const watch = client.watch(prefix ?? `${name}/`, { prefix: true, signal: interrupts.signal });
    try {
      await watch.created;
      await show();
      for await (const _batch of watch) await show();
    } catch (err) {
      if (!interrupts.signal.aborted) throw err;
    }
    return EXIT.ok;
  } finally {
    interrupts.dispose();
    await client.close();
    await metrics?.close();
  }
}

type InspectValues = Parameters<typeof connectTo>[0] & {
  json?: boolean;
  watch?: boolean;
  port?: string;
  listen?: string;
  open?: boolean;
  'show-values'?: boolean;
  'hide-values'?: boolean;
  elections?: string[];
};

/** `inspect --web [prefix]`: serves the live page until interrupted, then exits 0. */
async function web(values: InspectValues, positionals: string[]): Promise<number> {
  if (values.json || values.watch) throw new UsageError('--web shows a page; it does not go with --json or --watch');
  if (positionals.length > 1) throw new UsageError(`--web takes one prefix, got ${positionals.length} arguments`);
  const prefix = positionals[0] ?? '';
  if (prefix.includes('\0')) throw new UsageError('the prefix contains a NUL character');
  const { host, port } = listenAddress(values);
  const elections = electionGlobs(values.elections ?? []);
  const client = await connectTo(values);
  const interrupts = new Interrupts();
  let inspector: Inspector | undefined;
  try {
    if (values['hide-values'] && values['show-values']) throw new UsageError('--hide-values and --show-values exclude each other');
    // Labels say who holds: shown on loopback (this machine's users); hidden where others may look.
    const showValues = values['hide-values'] ? false : (values['show-values'] ?? isLoopback(host));
    inspector = new Inspector(client, { prefix, host, port, showValues, elections });
    let url: string;
    try {
      url = await inspector.start();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EADDRINUSE')
        throw new CliError(
          `${host}:${port} is in use (another inspector?); pass --port with another port, or --port 0 for a free one`,
          EXIT.error,
        );
      if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EACCES')
        throw new CliError(`cannot listen on ${host}:${port} (${code})`, EXIT.error);
      throw err;
    }
    if (!isLoopback(host)) {
      // The address bound (with --listen host:0, the port picked), as in the URL.
      warn(
        `listening on ${new URL(url).host}, not only on loopback: anyone who can reach it sees every name, lease and holder under the prefix (there is no login); ${showValues ? 'values are shown (--show-values)' : 'values are hidden (--show-values shows them)'}`,
      );
    }
    print(`inspector: ${url} (prefix ${prefix === '' ? '"" (every key)' : JSON.stringify(prefix)}; read-only; Ctrl-C to stop)`);
    if (values.open) openBrowser(url);
    await firstAborted(interrupts.signal);
    return EXIT.ok;
  } finally {
    interrupts.dispose();
    await inspector?.close();
    await client.close();
  }
}

/** A key prefix to inspect (it ends with `/`), checked as a name is. */
function prefixArg(raw: string): string {
  if (raw.includes('\0')) throw new UsageError('the prefix contains a NUL character');
  if (raw.trim() !== raw)
    throw new UsageError(`prefix ${JSON.stringify(raw)} starts or ends with white space; drop it (it would be part of the key)`);
  return raw;
}

/** The --elections globs, each flag split at commas; an empty one is refused. */
function electionGlobs(raw: string[]): string[] {
  const globs = raw.flatMap((r) => r.split(','));
  for (const g of globs) if (g.trim() === '') throw new UsageError('--elections needs a name or glob (an empty one matches nothing)');
  return globs;
}

/** 127.0.0.1:--port by default; --listen host:port otherwise. */
function listenAddress(values: InspectValues): { host: string; port: number } {
  const portOf = (raw: string, what: string): number => {
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isInteger(n) || n > 65535) throw new UsageError(`${what} must be a port number from 0 to 65535, got "${raw}"`);
    return n;
  };
  if (values.listen !== undefined) {
    if (values.port !== undefined) throw new UsageError('give --port or --listen host:port, not both');
    const m = /^\[([^\]]+)\]:(\d+)$/.exec(values.listen) ?? /^([^:[\]]+):(\d+)$/.exec(values.listen);
    if (!m) throw new UsageError(`--listen must be host:port (e.g. 0.0.0.0:${WEB_PORT} or [::]:${WEB_PORT}), got "${values.listen}"`);
    return { host: m[1]!, port: portOf(m[2]!, '--listen') };
  }
  return { host: '127.0.0.1', port: values.port === undefined ? WEB_PORT : portOf(values.port, '--port') };
}

/** Opens `url` with the desktop's opener when there is one; otherwise says how to open it. */
function openBrowser(url: string): void {
  const opener = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? undefined : 'xdg-open';
  const found = opener !== undefined && spawnSync('sh', ['-c', `command -v ${opener}`], { stdio: 'ignore' }).status === 0;
  if (!found) {
    print(`--open: no browser opener found${opener ? ` (${opener})` : ''}; open ${url} in a browser`);
    return;
  }
  const child = spawn(opener, [url], { stdio: 'ignore', detached: true });
  child.on('error', () => print(`--open: ${opener} failed; open ${url} in a browser`));
  child.unref();
}
