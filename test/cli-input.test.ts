// Command-line input that used to be misread: a negative value after an option,
// options a command does not take, a TTL below etcd's minimum. Every case must exit 2 with one line
// of our own before anything is sent. `--endpoints` (a closed port) goes first, before the command
// word, so that it can never land after a case's `--` and become part of the command to run: a case
// that got as far as dialling would exit 1 naming that port. Runs the built CLI (dist/cli/main.js):
// `npm run build` first.
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import { CLI_MAIN, closedPort, spawnCli } from './helpers.js';

let endpoint: string;

before(async () => {
  assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`);
  endpoint = `127.0.0.1:${await closedPort()}`;
});

/** Runs `etcd-concurrency --endpoints <closed port> ...args` to completion. */
async function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawnCli(['--endpoints', endpoint, ...args]);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

/** Exit 2 and exactly one `etcd-concurrency: ...` line on stderr that matches `re`. */
async function rejects(args: string[], re: RegExp, not?: RegExp): Promise<void> {
  const r = await run(args);
  const what = `${args.join(' ')}: ${r.stderr}`;
  assert.equal(r.code, 2, what);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, what);
  assert.match(lines[0]!, /^etcd-concurrency: /, what);
  assert.match(lines[0]!, re, what);
  if (not) assert.doesNotMatch(lines[0]!, not, what);
  assert.equal(r.stdout, '', what);
}

describe('values that start with a dash', () => {
  test('`--ttl -1` gets our own message, as `--ttl=-1` does, not parseArgs\' "ambiguous"', async () => {
    await Promise.all([
      rejects(['lock', 'x', '--ttl', '-1'], /--ttl must be a whole number of seconds from 2 to \d+, got "-1"/, /ambiguous/),
      rejects(['lock', 'x', '--ttl=-1'], /--ttl must be a whole number of seconds from 2 to \d+, got "-1"/),
      rejects(['elect', 'x', 'p', '--ttl', '-5'], /--ttl must be a whole number of seconds/, /ambiguous/),
      rejects(['lock', 'x', '--timeout', '-5s'], /--timeout must be a duration like 500ms, 10s or 2m, got "-5s"/, /ambiguous/),
      rejects(['lock', 'x', '--kill-grace', '-1s', '--', 'true'], /--kill-grace must be a duration/, /ambiguous/),
    ]);
  });

  test('an option where a value belongs says the value is missing', async () => {
    await Promise.all([
      rejects(['lock', 'x', '--ttl', '--json'], /--ttl needs a value, but --json follows it/),
      rejects(['inspect', 'x', '--dial-timeout', '-h'], /--dial-timeout needs a value, but -h follows it/),
      rejects(['lock', 'x', '--json=yes'], /--json takes no value/),
    ]);
  });

  test('an option that ends the line says its value is missing (parseArgs\' "argument missing")', async () => {
    // Nothing follows it, so only parseArgs sees it: the message has no ", but ... follows it".
    await Promise.all([
      rejects(['lock', 'x', '--timeout'], /--timeout needs a value/, /follows it/),
      rejects(['inspect', 'x', '--dial-timeout'], /--dial-timeout needs a value/, /follows it/),
    ]);
  });

  test('an option with a short form is named by its long name', async () => {
    // parseArgs quotes such an option as '-l, --listen'.
    await Promise.all([
      rejects(['elect', '--listen=yes', 'x'], /--listen takes no value/, /-l,/),
      rejects(['inspect', 'x', '--watch=1'], /--watch takes no value/, /-w,/),
      rejects(['elect', 'x', 'p', '--help=no'], /--help takes no value/, /-h,/),
    ]);
  });
});

describe('options a command does not take are refused, not ignored', () => {
  test('lock: --json with a command, --kill-grace without one', async () => {
    await Promise.all([
      rejects(['lock', 'x', '--json', '--', 'true'], /--json only applies without a command/),
      rejects(['lock', 'x', '--json', 'true'], /--json only applies without a command/),
      rejects(['lock', 'x', '--kill-grace', '5s'], /--kill-grace only applies with a command/),
    ]);
  });

  test('elect: --ttl with --listen', async () => {
    await rejects(['elect', '--listen', 'x', '--ttl', '10'], /--ttl only applies when campaigning/);
  });

  test('the accepted combinations still get as far as connecting (exit 1: nothing listens)', async () => {
    for (const args of [
      ['lock', 'x', '--json'],
      ['lock', 'x', '--kill-grace', '5s', '--', 'true'],
      ['lock', 'x', '--ttl', '2', '--timeout', '5s', '--', 'true'],
      ['elect', '--listen', 'x', '--json'],
      ['elect', 'x', 'p', '--ttl', '10'],
    ]) {
      const r = await run(args);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      // At the endpoint given (a closed port), not at the default one.
      assert.match(r.stderr, new RegExp(`could not connect to etcd.*${endpoint.replace(/\./g, '\\.')}`));
    }
  });
});

describe("TTL below etcd's minimum", () => {
  test('`--ttl 1` is refused (etcd would silently grant 2 s), for lock and elect', async () => {
    await Promise.all([
      rejects(['lock', 'x', '--ttl', '1'], /--ttl 1 is below etcd's minimum lease TTL.*use --ttl 2 or more/),
      rejects(['elect', 'x', 'p', '--ttl', '1'], /--ttl 1 is below etcd's minimum lease TTL/),
    ]);
  });
});
