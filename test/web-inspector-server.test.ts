// `etcd-concurrency inspect --web` without a browser: it binds loopback only unless --listen, refuses
// other Host names and writes, runs the desktop opener for --open, and rejects bad flags. Real etcd
// and real CLI processes (dist/cli/main.js: `npm run build` first). Every wait is on a child's
// output, its exit or etcd state; never on a sleep. The page in a browser: web-inspector*.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { waitFor } from './helpers.js';
import { inspectorFile } from './web-inspector-fixture.js';

const ROOT = 'test/web-server/';

let endpoint: string;

const { fresh, start, inspector } = inspectorFile(ROOT, (e) => (endpoint = e.endpoints[0]!), { browser: false });

/** An HTTP request to the inspector with a chosen Host header and method (fetch cannot set Host). */
function rawGet(url: string, options: { host?: string; method?: string; address?: string } = {}): Promise<number> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: options.address ?? u.hostname,
        port: u.port,
        path: '/',
        method: options.method ?? 'GET',
        headers: options.host ? { host: options.host } : {},
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
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
      await waitFor(() => new RegExp(`listening on 0\\.0\\.0\\.0:${port}, not only on loopback`).test(wide.proc.stderr()), 'the warning');
      assert.doesNotMatch(wide.proc.stderr(), /0\.0\.0\.0:0\b/);
      assert.equal(await rawGet(`http://127.0.0.1:${port}/`, { host: `inspector.example:${port}` }), 200);
    } finally {
      assert.equal(await wide.proc.kill('SIGINT'), 0);
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
