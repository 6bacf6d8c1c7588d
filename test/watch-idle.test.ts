// A client whose watches all ended ends its watch stream once idle (WatchHub's idle timer), so a
// process that never closes its client still exits: each scenario runs in a child process that
// makes a Client, leaves it open, and must exit on its own.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, within } from './helpers.js';

const ROOT = 'test/watch-idle/';
let etcd: EtcdCluster;
const fresh = etcdForFile(ROOT, (e) => (etcd = e));
const root = fileURLToPath(new URL('..', import.meta.url));
const index = pathToFileURL(fileURLToPath(new URL('../src/index.ts', import.meta.url))).href;

/** Runs `body` (with `c`, an open Client, and `p`, a key prefix) in a child process that never closes `c`; resolves once it exits. */
async function exitsOnItsOwn(p: string, body: string): Promise<void> {
  const script = `import { Client } from ${JSON.stringify(index)};
const c = new Client({ endpoints: ${JSON.stringify(etcd.endpoints)} });
const p = ${JSON.stringify(p)};
${body}
process.stdout.write('ran\\n');`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  try {
    const [code] = await within(exited, 'the process to exit with its client left open', 20_000);
    assert.equal(code, 0, out);
    assert.match(out, /ran/);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

describe('an idle watch stream ends, so the process can exit', () => {
  it('after a watch that was created and cancelled', () =>
    exitsOnItsOwn(fresh('created'), `const w = c.watch(p + 'k'); await w.created; w.cancel();`));

  it('after a watch cancelled before etcd confirmed it (its create request on the stream)', () =>
    exitsOnItsOwn(
      fresh('pending'),
      // b's create goes out at once on a's stream; a's cancel leaves b the last, still awaiting its answer.
      `const a = c.watch(p + 'a'); await a.created; const b = c.watch(p + 'b'); b.cancel(); a.cancel();`,
    ));

  it('after a watch cancelled while its stream was opening', () =>
    exitsOnItsOwn(fresh('opening'), `const w = c.watch(p + 'k'); w.cancel();`));
});
