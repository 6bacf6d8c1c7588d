// Keys and values written by someone else (anyone who can write under a name) reach the operator's
// terminal through every command that prints them: escape sequences (clear the screen, set the
// window title, write the clipboard with OSC 52), C1 controls, bidi overrides and line breaks must
// arrive inert. Text output shows them escaped; JSON output stays valid and gives back the exact
// strings. Real etcd, the built CLI (dist/cli/main.js): `npm run build` first.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Client } from '../src/index.js';
import { cliFile, runCli as start, runCliToEnd as run } from './helpers.js';

const ROOT = 'test/cli-hostile/';

let client: Client;
let endpoint: string;

const { fresh } = cliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

/**
 * Clear the screen, set the window title, write the clipboard (OSC 52), the same with C1 controls
 * (CSI, OSC and ST as single characters), a right-to-left override, an isolate, CR, LF, BEL, DEL.
 */
const HOSTILE = '\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\u009b2J\u009d0;t\u009c\u202eevil\u202c\u2066i\u2069\r\n\x07\x7f';

/** What a terminal may act on, or what changes how a line reads; a line break only between lines. */
const UNSAFE = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;

/** Every line of `out` is inert: no character a terminal acts on, no bidi control. */
function assertInert(out: string, what: string): void {
  const hit = UNSAFE.exec(out)?.[0];
  assert.equal(hit, undefined, `${what}: U+${hit?.charCodeAt(0).toString(16).padStart(4, '0')} in ${JSON.stringify(out)}`);
}

/** A lease of 60 s for the keys a test writes by hand; revoked (its keys with it) by the test. */
async function lease(): Promise<{ id: bigint; hex: string; revoke(): Promise<void> }> {
  const { id } = await client.leaseGrant(60);
  return { id, hex: id.toString(16), revoke: () => client.leaseRevoke(id) };
}

const ep = (): string[] => ['--endpoints', endpoint];

describe('hostile keys and values reach the terminal inert', () => {
  test('lock: --try, --timeout and --verbose name the holder', async () => {
    const name = fresh('lock');
    const l = await lease();
    try {
      await client.put(`${name}/${l.hex}`, HOSTILE, { lease: l.id });
      const tried = await run(['lock', name, '--try', ...ep()]);
      assert.equal(tried.code, 4, tried.stderr);
      assert.match(tried.stderr, /is taken \(held by /);
      assertInert(tried.stdout + tried.stderr, 'lock --try');
      const timed = await run(['lock', name, '--timeout', '1', '--verbose', ...ep()]);
      assert.equal(timed.code, 4, timed.stderr);
      assert.match(timed.stderr, /queued as .* behind /);
      assertInert(timed.stdout + timed.stderr, 'lock --timeout --verbose');

      const sem = fresh('semaphore');
      await client.put(`${sem}/${l.hex}`, `1 ${HOSTILE}`, { lease: l.id });
      const full = await run(['lock', sem, '--limit', '1', '--try', ...ep()]);
      assert.equal(full.code, 4, full.stderr);
      assertInert(full.stdout + full.stderr, 'lock --limit --try');
    } finally {
      await l.revoke();
    }
  });

  test('lock --read/--write --try: the oldest participant, never a key of another shape', async () => {
    const name = fresh('rw');
    const l = await lease();
    try {
      // Older than the writer, and no participant: the message names the writer.
      await client.put(`${name}/${HOSTILE}`, HOSTILE, { lease: l.id });
      await client.put(`${name}/write/${l.hex}`, HOSTILE, { lease: l.id });
      for (const mode of ['--read', '--write']) {
        const r = await run(['lock', name, mode, '--try', ...ep()]);
        assert.equal(r.code, 4, r.stderr);
        assert.match(r.stderr, new RegExp(`oldest holder ${name}/write/${l.hex} "`));
        assertInert(r.stdout + r.stderr, `lock ${mode} --try`);
      }
    } finally {
      await l.revoke();
    }
  });

  test('inspect: text, --json and --watch; the JSON gives the strings back exactly', async () => {
    const name = fresh('inspect');
    const [a, b] = [await lease(), await lease()];
    try {
      await client.put(`${name}/${a.hex}`, HOSTILE, { lease: a.id });
      await client.put(`${name}/${b.hex}`, `waiter ${HOSTILE}`, { lease: b.id });
      const text = await run(['inspect', name, ...ep()]);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, /owned by /);
      assertInert(text.stdout + text.stderr, 'inspect');

      const json = await run(['inspect', name, '--json', ...ep()]);
      assert.equal(json.code, 0, json.stderr);
      assertInert(json.stdout + json.stderr, 'inspect --json');
      const doc = JSON.parse(json.stdout) as { owner: { value: string; label: string }; waiting: { value: string }[] };
      assert.equal(doc.owner.value, HOSTILE);
      assert.equal(doc.owner.label, HOSTILE);
      assert.equal(doc.waiting[0]!.value, `waiter ${HOSTILE}`);

      for (const format of [['--json'], []]) {
        const w = start(['inspect', name, '--watch', ...format, ...ep()]);
        await w.next(format.length ? /^\{/ : /owned by/);
        w.signal('SIGINT');
        assert.equal(await w.exited, 0);
        assertInert(w.output(), `inspect --watch ${format.join(' ')}`);
      }
    } finally {
      await a.revoke();
      await b.revoke();
    }
  });

  test('inspect of a prefix and of a name: nested names and stray keys', async () => {
    const base = fresh('nested');
    const nested = `${base}/${HOSTILE}`;
    const l = await lease();
    try {
      await client.put(`${nested}/${l.hex}`, HOSTILE, { lease: l.id });
      // A stray key (no lease) beside it, and one of the name itself.
      await client.put(`${nested}/a${l.hex}`, HOSTILE);
      await client.put(`${base}/b${l.hex}`, HOSTILE);
      for (const args of [[`${base}/`], [`${base}/`, '--json'], [base], [base, '--json']]) {
        const r = await run(['inspect', ...args, ...ep()]);
        assert.equal(r.code, 0, r.stderr);
        assertInert(r.stdout + r.stderr, `inspect ${args.join(' ')}`);
        if (!args.includes('--json')) {
          assert.match(r.stdout, /^stray /m);
          continue;
        }
        type S = { name: string; owner: { value: string }; stray: { key: string; value: string }[] };
        const doc = JSON.parse(r.stdout) as { names?: S[]; nested?: S[]; stray?: S['stray'] };
        const shown = (doc.names ?? doc.nested)!.find((n) => n.name === nested)!;
        assert.equal(shown.owner.value, HOSTILE);
        assert.deepEqual(
          shown.stray.map((k) => [k.key, k.value]),
          [[`${nested}/a${l.hex}`, HOSTILE]],
        );
        if (doc.stray) assert.equal(doc.stray[0]!.key, `${base}/b${l.hex}`);
      }
    } finally {
      await l.revoke();
      await client.delete(`${nested}/a${l.hex}`);
      await client.delete(`${base}/b${l.hex}`);
    }
  });

  test('elect --listen: a proposal in text and JSON', async () => {
    const name = fresh('elect');
    const l = await lease();
    try {
      await client.put(`${name}/${l.hex}`, HOSTILE, { lease: l.id });
      const text = start(['elect', '--listen', name, ...ep()]);
      await text.next(/^leader /);
      text.signal('SIGINT');
      assert.equal(await text.exited, 0);
      assertInert(text.output(), 'elect --listen');
      const json = start(['elect', '--listen', name, '--json', ...ep()]);
      const line = await json.next(/^\{/);
      json.signal('SIGINT');
      assert.equal(await json.exited, 0);
      assertInert(json.output(), 'elect --listen --json');
      assert.equal((JSON.parse(line) as { value: string }).value, HOSTILE);
    } finally {
      await l.revoke();
    }
  });
});
