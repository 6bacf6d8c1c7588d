// `lock --metrics` and `elect --metrics`: the built CLI (run `npm run build` first) serves the
// library's instruments in Prometheus text format; a real HTTP scrape while one process holds a
// lock and another waits for it sees the held and waiting series. Every wait is on a child's output
// line, its exit, or a scrape's content; never on a sleep.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Client } from '../src/index.js';
import { metricsAddress } from '../src/cli/metrics.js';
import { UsageError } from '../src/cli/output.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForCliFile, runCli, waitFor, type CliProc } from './helpers.js';

const ROOT = 'test/metrics-cli/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForCliFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A CLI child on this file's etcd (`--endpoints` goes last). */
const cli = (args: string[]): CliProc => runCli([...args, '--endpoints', etcd.endpoints[0]!]);

/** The metrics URL the child printed on stderr. */
async function metricsUrl(p: CliProc): Promise<string> {
  return (await p.match(/metrics at (http:\/\/127\.0\.0\.1:\d+\/metrics)/, 'stderr'))[1]!;
}

async function scrape(url: string): Promise<string> {
  const r = await fetch(url);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /text\/plain/);
  return r.text();
}

/** The value of the series `metric{...}` whose labels include every pair, or undefined. */
function sample(text: string, metric: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

describe('--metrics', () => {
  it('lock: a scrape while one process holds and another waits shows held 1 and waiting 1, by name', { timeout: 60_000 }, async () => {
    const name = `${fresh('lock')}deploy`;
    const labels = { etcd_concurrency_kind: 'lock', etcd_concurrency_name: name };
    const holder = cli(['lock', '--metrics', '127.0.0.1:0', name]);
    const holderUrl = await metricsUrl(holder);
    await holder.next(/^key=\S+ rev=\d+$/);
    const waiter = cli(['lock', name, '--metrics', '127.0.0.1:0']);
    const waiterUrl = await metricsUrl(waiter);
    assert.notEqual(holderUrl, waiterUrl);

    const held = await scrape(holderUrl);
    assert.equal(sample(held, 'etcd_concurrency_held', labels), 1, held);
    assert.match(held, /# TYPE etcd_concurrency_acquire_duration histogram/);
    assert.equal(sample(held, 'etcd_concurrency_acquire_duration_count', { ...labels, etcd_concurrency_result: 'acquired' }), 1, held);
    assert.ok(
      (sample(held, 'rpc_client_call_duration_count', { rpc_method: 'etcdserverpb.KV/Txn', rpc_response_status_code: 'OK' }) ?? 0) >= 1,
      held,
    );
    // The waiter counts itself once its key is queued.
    const waiting = await waitFor(async () => {
      const text = await scrape(waiterUrl);
      return sample(text, 'etcd_concurrency_waiting', labels) === 1 ? text : undefined;
    }, 'the waiter reports waiting 1');
    assert.match(waiting, /# TYPE etcd_concurrency_waiting gauge/);
    assert.equal(sample(waiting, 'etcd_concurrency_held', labels) ?? 0, 0);

    // The holder lets go: the waiter holds, and its scrape says so.
    holder.child.kill('SIGINT');
    assert.equal(await holder.exited, 0, holder.output());
    await waiter.next(/^key=\S+ rev=\d+$/);
    const after = await scrape(waiterUrl);
    assert.equal(sample(after, 'etcd_concurrency_held', labels), 1, after);
    assert.equal(sample(after, 'etcd_concurrency_waiting', labels), 0, after);
    waiter.child.kill('SIGINT');
    assert.equal(await waiter.exited, 0, waiter.output());
    assert.equal((await client.getPrefix(`${name}/`)).kvs.length, 0);
  });

  it('elect: the leader reports election_leader 1 for its election', { timeout: 60_000 }, async () => {
    const name = `${fresh('elect')}scheduler`;
    const leader = cli(['elect', '--metrics', '127.0.0.1:0', name, 'one']);
    const url = await metricsUrl(leader);
    await leader.next(/^leader key=/);
    const text = await scrape(url);
    assert.equal(sample(text, 'etcd_concurrency_election_leader', { etcd_concurrency_name: name }), 1, text);
    assert.equal(
      sample(text, 'etcd_concurrency_election_transitions_total', { etcd_concurrency_name: name, etcd_concurrency_leading: 'true' }),
      1,
      text,
    );
    assert.equal((await fetch(url.replace(/\/metrics$/, '/other'))).status, 404);
    leader.child.kill('SIGINT');
    assert.equal(await leader.exited, 0, leader.output());
  });

  it("inspect --watch: a scrape shows the inspected name's holders and waiters, and the client's calls", { timeout: 60_000 }, async () => {
    const name = `${fresh('inspect')}jobs`;
    const labels = { etcd_concurrency_name: name };
    const inspector = cli(['inspect', '--watch', name, '--metrics', '127.0.0.1:0']);
    const url = await metricsUrl(inspector);
    const holder = cli(['lock', name]);
    await holder.next(/^key=\S+ rev=\d+$/);
    const waiter = cli(['lock', name]);
    // Both participants, as the inspector last saw them.
    const text = await waitFor(async () => {
      const t = await scrape(url);
      return sample(t, 'etcd_concurrency_inspect_holders', labels) === 1 && sample(t, 'etcd_concurrency_inspect_waiting', labels) === 1
        ? t
        : undefined;
    }, 'the inspector reports 1 holder and 1 waiter');
    assert.ok(
      (sample(text, 'rpc_client_call_duration_count', { rpc_method: 'etcdserverpb.KV/Range', rpc_response_status_code: 'OK' }) ?? 0) >= 1,
      text,
    );
    holder.child.kill('SIGINT');
    assert.equal(await holder.exited, 0, holder.output());
    await waiter.next(/^key=\S+ rev=\d+$/);
    await waitFor(async () => {
      const t = await scrape(url);
      return sample(t, 'etcd_concurrency_inspect_holders', labels) === 1 && sample(t, 'etcd_concurrency_inspect_waiting', labels) === 0;
    }, 'the inspector reports the waiter holding, nobody waiting');
    waiter.child.kill('SIGINT');
    assert.equal(await waiter.exited, 0, waiter.output());
    await waitFor(async () => {
      const t = await scrape(url);
      return sample(t, 'etcd_concurrency_inspect_holders', labels) === 0 && sample(t, 'etcd_concurrency_inspect_waiting', labels) === 0;
    }, 'the inspector reports nobody left');
    inspector.child.kill('SIGINT');
    assert.equal(await inspector.exited, 0, inspector.output());
    // A one-shot inspect has nothing to serve: refused as bad usage.
    const once = cli(['inspect', name, '--metrics', '127.0.0.1:0']);
    assert.equal(await once.exited, 2, once.output());
    assert.match(once.output(), /--metrics only applies with --watch/);
    const web = cli(['inspect', '--web', '--port', '0', '--metrics', '127.0.0.1:0']);
    assert.equal(await web.exited, 2, web.output());
    assert.match(web.output(), /--metrics only applies with --watch, not with --web/);
  });

  it('a port alone listens on loopback: --metrics 0 and --metrics :0 serve at 127.0.0.1', { timeout: 60_000 }, async () => {
    for (const flag of ['0', ':0']) {
      const name = `${fresh('loopback')}job`;
      const p = cli(['lock', '--metrics', flag, name]);
      const url = (await p.match(/metrics at (http:\/\/\S+)/, 'stderr'))[1]!;
      assert.match(url, /^http:\/\/127\.0\.0\.1:[1-9]\d*\/metrics$/, `--metrics ${flag}`);
      await p.next(/^key=\S+ rev=\d+$/);
      assert.equal(sample(await scrape(url), 'etcd_concurrency_held', { etcd_concurrency_name: name }), 1);
      p.child.kill('SIGINT');
      assert.equal(await p.exited, 0, p.output());
    }
  });

  it('a bad address is a usage error before anything connects', async () => {
    const p = cli(['lock', 'x', '--metrics', 'localhost:notaport']);
    assert.equal(await p.exited, 2, p.output());
    assert.match(p.output(), /--metrics must be host:port or a port/);
  });
});

describe('metricsAddress: what --metrics accepts', () => {
  it('a port alone, or after a colon, is loopback; a host or a bracketed IPv6 address is kept', () => {
    assert.deepEqual(metricsAddress('9464'), { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(metricsAddress(':9464'), { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(metricsAddress('0'), { host: '127.0.0.1', port: 0 });
    assert.deepEqual(metricsAddress('[::1]:9464'), { host: '::1', port: 9464 });
    assert.deepEqual(metricsAddress('0.0.0.0:9464'), { host: '0.0.0.0', port: 9464 });
    assert.deepEqual(metricsAddress('localhost:9464'), { host: 'localhost', port: 9464 });
    assert.deepEqual(metricsAddress(' 127.0.0.1:65535 '), { host: '127.0.0.1', port: 65535 });
  });

  it('anything else is a usage error naming the value', () => {
    for (const raw of ['', 'localhost', 'localhost:notaport', '65536', '::1:9464', '[::1]', 'http://127.0.0.1:9464']) {
      assert.throws(
        () => metricsAddress(raw),
        (err: unknown) => err instanceof UsageError && err.message.includes(`got "${raw}"`),
        JSON.stringify(raw),
      );
    }
  });
});
