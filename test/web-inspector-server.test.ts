// `etcd-concurrency inspect --web` without a browser: it binds loopback only unless --listen, refuses
// other Host names and writes, runs the desktop opener for --open, and rejects bad flags. Real etcd
// and real CLI processes (dist/cli/main.js: `npm run build` first). Every wait is on a child's
// output, its exit or etcd state; never on a sleep. The page in a browser: web-inspector*.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { request, type IncomingMessage } from 'node:http';
import { hostname, networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { waitFor, within } from './helpers.js';
import { inspectorFile } from './web-inspector-fixture.js';

const ROOT = 'test/web-server/';

let endpoint: string;

const { fresh, start, inspector } = inspectorFile(ROOT, (e) => (endpoint = e.endpoints[0]!), { browser: false });

/** An HTTP request to the inspector with a chosen Host header and method (fetch cannot set Host). */
function rawGet(url: string, options: { host?: string; method?: string; address?: string; path?: string } = {}): Promise<number> {
  return rawRequest(url, options).then((r) => {
    r.res.destroy();
    return r.status;
  });
}

/**
 * The same, on a connection of its own, resolving once the status and headers are in: the response
 * is left open (an event stream stays open until `res.destroy()`); `body` resolves with what it sent.
 */
function rawRequest(
  url: string,
  options: { host?: string; method?: string; address?: string; path?: string } = {},
): Promise<{ status: number; res: IncomingMessage; body: Promise<string> }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: options.address ?? u.hostname,
        port: u.port,
        path: options.path ?? '/',
        method: options.method ?? 'GET',
        headers: options.host ? { host: options.host } : {},
        agent: false,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        const body = new Promise<string>((done) => res.on('close', () => done(text)));
        resolve({ status: res.statusCode ?? 0, res, body });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

// ── tests ──────────────────────────────────────────────────────────────────────────────────────

describe('inspect --web without a browser', () => {
  test('binds loopback only unless --listen, which warns; refuses other Host names and writes', async () => {
    const prefix = fresh('bind');
    const ins = await inspector(prefix);
    try {
      const url = new URL(ins.url);
      assert.equal(url.hostname, '127.0.0.1');
      assert.equal(ins.proc.stderr(), '');
      assert.equal(await rawGet(ins.url), 200);
      // A DNS name rebound to 127.0.0.1 by some web page must not reach the data.
      assert.equal(await rawGet(ins.url, { host: `attacker.example:${url.port}` }), 403);
      assert.equal(await rawGet(ins.url, { method: 'POST' }), 405);
      const outside = Object.values(networkInterfaces())
        .flat()
        .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
      if (outside) {
        await assert.rejects(rawGet(ins.url, { address: outside }), /ECONNREFUSED/, `the inspector answers on ${outside} without --listen`);
      }
    } finally {
      assert.equal(await ins.proc.kill('SIGTERM'), 0);
    }

    const wide = await inspector(prefix, ['--listen', '0.0.0.0:0']);
    try {
      assert.match(wide.url, /^http:\/\/0\.0\.0\.0:\d+\/$/);
      const port = new URL(wide.url).port;
      // The warning names the address bound (the port picked for :0), as the URL does.
      await within(wide.proc.next(new RegExp(`listening on 0\\.0\\.0\\.0:${port}, not only on loopback`), 'stderr'), 'the warning', 30_000);
      assert.doesNotMatch(wide.proc.stderr(), /0\.0\.0\.0:0\b/);
    } finally {
      assert.equal(await wide.proc.kill('SIGINT'), 0);
    }
  });

  test("on every address (--listen 0.0.0.0): answers to addresses and this host's name, never to another name (DNS rebinding)", async () => {
    const prefix = fresh('rebind');
    const wide = await inspector(prefix, ['--listen', '0.0.0.0:0']);
    try {
      const port = new URL(wide.url).port;
      const at = `http://127.0.0.1:${port}/`;
      for (const host of [`127.0.0.1:${port}`, `10.1.2.3:${port}`, `[fd00::1]:${port}`, `localhost:${port}`, `${hostname()}:${port}`]) {
        assert.equal(await rawGet(at, { host }), 200, host);
      }
      // A page of attacker.example whose name now resolves to this machine sends its own name.
      for (const host of [`attacker.example:${port}`, `attacker.example`, `127.0.0.1.attacker.example:${port}`]) {
        assert.equal(await rawGet(at, { host }), 403, host);
        assert.equal(await rawGet(at, { host, path: '/events' }), 403, `${host} /events`);
      }
      const refused = await rawRequest(at, { host: `attacker.example:${port}` });
      assert.match(await refused.body, /^forbidden: this inspector answers to IP addresses and to .* only; .*--listen/);
    } finally {
      assert.equal(await wide.proc.kill('SIGINT'), 0);
    }
    const outside = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    if (!outside) return;
    // On one address: that address only.
    const one = await inspector(prefix, ['--listen', `${outside}:0`]);
    try {
      const port = new URL(one.url).port;
      assert.equal(await rawGet(one.url, { host: `${outside}:${port}` }), 200);
      assert.equal(await rawGet(one.url, { host: `attacker.example:${port}` }), 403);
    } finally {
      assert.equal(await one.proc.kill('SIGINT'), 0);
    }
  });

  test('the live connections (/events) are capped: past the cap a clear 503, and room again once one closes', async () => {
    const prefix = fresh('cap');
    const ins = await inspector(prefix);
    const open: IncomingMessage[] = [];
    try {
      for (;;) {
        const r = await rawRequest(ins.url, { path: '/events' });
        if (r.status !== 200) {
          assert.equal(r.status, 503);
          assert.match(
            await r.body,
            new RegExp(`^too many live pages: ${open.length} are open, the most this inspector serves; close one`),
          );
          break;
        }
        open.push(r.res);
        assert.ok(open.length <= 1000, 'no cap after 1000 connections');
      }
      assert.ok(open.length >= 8, `a cap of ${open.length} pages is too small`);
      // The page and its state still load; one stream closes, and a new one is served.
      assert.equal(await rawGet(ins.url), 200);
      const closed = once(open[0]!, 'close');
      open.shift()!.destroy();
      await closed;
      const again = await waitFor(async () => {
        const r = await rawRequest(ins.url, { path: '/events' });
        if (r.status === 200) return r.res;
        r.res.destroy();
        return undefined;
      }, 'room for a page again');
      open.push(again);
    } finally {
      for (const res of open) res.destroy();
      assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
    }
  });

  test('--open runs the desktop opener with the URL, or says how to open the page when there is none', {
    skip: process.platform !== 'linux' && 'xdg-open is the opener on Linux',
  }, async () => {
    const prefix = fresh('open');
    const dir = mkdtempSync(path.join(tmpdir(), 'web-open-'));
    try {
      // A fake xdg-open first on PATH: it records what it was asked to open, and exits.
      const opened = path.join(dir, 'opened');
      mkdirSync(path.join(dir, 'opener'));
      writeFileSync(
        path.join(dir, 'opener', 'xdg-open'),
        `#!/bin/sh\nprintf '%s\\n' "$*" > '${opened}.tmp' && mv '${opened}.tmp' '${opened}'\n`,
        { mode: 0o755 },
      );
      const ins = await inspector(prefix, ['--open'], endpoint, { PATH: `${path.join(dir, 'opener')}:${process.env.PATH ?? ''}` });
      try {
        const got = await waitFor(() => existsSync(opened) && readFileSync(opened, 'utf8'), 'the opener run');
        assert.equal(got, `${ins.url}\n`);
      } finally {
        assert.equal(await ins.proc.kill('SIGTERM'), 0, ins.proc.stderr());
      }
      // No opener on PATH (only a shell): the URL to open by hand.
      mkdirSync(path.join(dir, 'bare'));
      symlinkSync('/bin/sh', path.join(dir, 'bare', 'sh'));
      const bare = await inspector(prefix, ['--open'], endpoint, { PATH: path.join(dir, 'bare') });
      try {
        await bare.proc.next(
          new RegExp(`^--open: no browser opener found \\(xdg-open\\); open ${bare.url.replace(/[.]/g, '\\.')} in a browser$`),
        );
      } finally {
        assert.equal(await bare.proc.kill('SIGTERM'), 0, bare.proc.stderr());
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('bad flags exit 2 with one line', async () => {
    const cases: [string[], RegExp][] = [
      [['inspect', '--web', 'x/', '--port', '1', '--listen', '127.0.0.1:2'], /--port or --listen/],
      [['inspect', '--web', 'x/', '--listen', 'nowhere'], /--listen must be host:port/],
      [['inspect', '--web', 'x/', '--port', '70000'], /--port must be a port number/],
      [['inspect', 'x', '--port', '1'], /--port only applies with --web/],
      [['inspect', 'x', '--show-values'], /--show-values only applies with --web/],
      [['inspect', '--web', 'x/', '--json'], /does not go with --json/],
      [['inspect', 'x', '--elections', 'x'], /--elections only applies with --web/],
      [['inspect', '--web', 'x/', '--elections', 'a,,b'], /--elections needs a name or glob/],
    ];
    for (const [args, re] of cases) {
      const p = start(args);
      assert.equal(await p.exited, 2, `${args.join(' ')}: ${p.stderr()}`);
      assert.match(p.stderr(), re);
      assert.equal(p.stderr().trimEnd().split('\n').length, 1, p.stderr());
    }
  });
});
