// The README's main command: `npm run demo`. Runs the whole narrated story in --fast --quiet mode as
// a child process (its own 3-member etcd cluster, its own worker processes) and checks that it
// exits 0 on its own and reports every invariant as held. Then, cheaply, `npm run demo -- --web`:
// the inspector's URL is printed and answers, and an interrupt stops it all.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { get } from 'node:http';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { findPostgres } from '../src/testing/index.js';

const root = fileURLToPath(new URL('..', import.meta.url));

test('npm run demo -- --fast --quiet: the story runs, every invariant holds, everything is cleaned up', { timeout: 180_000 }, async () => {
  const started = performance.now();
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/demo/main.ts', '--fast', '--quiet'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  // A hang guard, not a timing assertion: the demo must end by itself.
  const guard = setTimeout(() => child.kill('SIGKILL'), 170_000);
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
  clearTimeout(guard);
  const elapsed = performance.now() - started;
  const output = `exit ${code ?? signal} after ${Math.round(elapsed)} ms\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}`;

  assert.equal(code, 0, output);
  for (const line of [
    /FIFO order held: yes/,
    /tokens strictly increasing: yes/,
    /double-applied writes: 0\b/,
    /late write rejected by fencing: yes/,
    /ghost told by its lock handle before writing: yes/,
    /new leader after SIGKILL in \d+ ms \(TTL \d+ s\): yes/,
    /graceful resign handed over in \d+ ms: yes/,
    /locks kept across Raft leader kill: yes/,
    /nothing left behind in etcd: yes/,
    /cleaned up: cluster stopped, children gone: yes/,
    /All invariants held\./,
  ]) {
    assert.match(stdout, line, output);
  }
  assert.doesNotMatch(stdout, /✗|NO\b|FAILED/, output);
  // With PostgreSQL on the machine, the ghost's write is refused by the database itself (PostgresFence).
  if (findPostgres()) assert.match(stdout, /PostgreSQL holds the accepted charges, in token order: yes/, output);
  // --quiet: the summary only, no narration; no colors when NO_COLOR is set (and stdout is a pipe).
  assert.doesNotMatch(stdout, /SIGSTOP|joins the queue|── \d/, output);
  assert.doesNotMatch(stdout, /\x1b\[/, output);
  // The process ended on its own, not through the demo's "something kept the process alive" guard.
  assert.doesNotMatch(stderr, /kept the process alive/, output);
});

test("npm run demo -- --web: prints the web inspector's URL, which serves the page and its event stream; Ctrl-C stops everything", {
  timeout: 120_000,
}, async () => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/demo/main.ts', '--fast', '--quiet', '--web'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  // A hang guard, not a timing assertion.
  const guard = setTimeout(() => child.kill('SIGKILL'), 110_000);
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
        const m = /^web inspector: (http:\/\/127\.0\.0\.1:\d+\/) /m.exec(stdout);
        if (m) resolve(m[1]!);
      });
      void exited.then(([code, signal]) =>
        reject(new Error(`the demo ended (${code ?? signal}) before printing its URL\n${stdout}\n${stderr}`)),
      );
    });
    const page = await fetch(url);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /etcd-concurrency inspector/);
    // The first page to connect to the event stream starts the story (the demo waits for one).
    const first = await new Promise<string>((resolve, reject) => {
      get(`${url}events`, (res) => {
        if (res.statusCode !== 200) reject(new Error(`/events answered ${res.statusCode}`));
        res.setEncoding('utf8').once('data', (d: string) => {
          res.destroy();
          resolve(d);
        });
      }).on('error', reject);
    });
    assert.match(first, /^retry: \d+\nevent: snapshot\n/);
    await new Promise<void>((resolve) => {
      const check = (): void => void (/a browser is watching: starting/.test(stdout) && resolve());
      child.stdout.on('data', check);
      check();
    });
    child.kill('SIGINT');
    const [code, signal] = await exited;
    // It dies of the signal (as an interrupted process should) or exits 130, having stopped etcd and its workers.
    assert.ok(signal === 'SIGINT' || code === 130, `exit ${code ?? signal}\n${stdout}\n${stderr}`);
    assert.match(stderr, /demo: SIGINT: stopping workers and etcd/);
    await assert.rejects(fetch(url), 'the inspector still answers after the demo ended');
  } finally {
    clearTimeout(guard);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  }
});
