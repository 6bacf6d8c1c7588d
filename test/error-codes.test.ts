// Stable string error codes: every error class the package exports has its own
// `code` ('ERR_ETCD_UNAVAILABLE', as Node's and undici's errors), the README's table lists exactly
// them, the gRPC status is `grpcCode`, and a lost handle's error says why in `reason`, so that no code
// (ours or a user's) has to match message text. Against a real single-member etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as api from '../src/index.js';
import * as testing from '../src/testing/index.js';
import {
  type Client,
  Election,
  EtcdError,
  LeadershipLostError,
  LeaseNotFoundError,
  LockLostError,
  Mutex,
  NotLeaderError,
  OwnershipLostError,
  Session,
} from '../src/index.js';
import { aborted, etcdForFile } from './helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROOT = 'test/error-codes/';
let client: Client;
const fresh = etcdForFile(ROOT, (_etcd, c) => (client = c));

type ErrorClass = (abstract new (...args: never[]) => Error) & { code?: unknown };

/**
 * Every error class the package exports, by export name: the main entry point and `/testing`.
 * NOTE: an error class exported later (the fencing module's StaleTokenError, 'ERR_STALE_TOKEN') is
 * picked up here once it is re-exported from src/index.ts, and then needs its own row in the README.
 */
function exportedErrorClasses(): Map<string, ErrorClass> {
  const out = new Map<string, ErrorClass>();
  for (const [name, v] of [...Object.entries(api), ...Object.entries(testing)]) {
    if (typeof v === 'function' && v.prototype instanceof Error) out.set(name, v as ErrorClass);
  }
  return out;
}

/** The error-code table of docs/errors.md: code → class name. */
async function readmeTable(): Promise<Map<string, string>> {
  const readme = await readFile(path.join(root, 'docs/errors.md'), 'utf8');
  const section = /<!-- error-codes:start -->\n([\s\S]*?)<!-- error-codes:end -->/.exec(readme);
  assert.ok(section, 'docs/errors.md has an error-codes table between its markers');
  const rows = new Map<string, string>();
  for (const m of section[1]!.matchAll(/^\| `(ERR_[A-Z0-9_]+)` \| `(\w+)`/gm)) {
    assert.ok(!rows.has(m[1]!), `${m[1]} listed twice`);
    rows.set(m[1]!, m[2]!);
  }
  return rows;
}

describe('error codes: one per class, in the README', () => {
  it('every exported error class has its own stable string code, and its instances carry it', () => {
    const classes = exportedErrorClasses();
    assert.ok(classes.size >= 20, `found ${classes.size} error classes`);
    const seen = new Map<string, string>();
    for (const [name, C] of classes) {
      assert.ok(Object.hasOwn(C, 'code'), `${name} declares its own static code (not its parent's)`);
      const code = C.code as string;
      assert.match(code, /^ERR_[A-Z0-9_]+$/, `${name}.code`);
      assert.ok(!seen.has(code), `${name} and ${seen.get(code)} share ${code}`);
      seen.set(code, name);
      // The base constructor stamps the code of the class being built, whatever its own constructor takes.
      const e = C.prototype instanceof EtcdError ? Reflect.construct(EtcdError, ['m'], C) : Reflect.construct(C, ['m', undefined]);
      assert.equal((e as { code?: unknown }).code, code, `a ${name} carries its code`);
      assert.equal((e as Error).name, name);
    }
  });

  it("the README's table lists exactly the exported classes, each with its code", async () => {
    const rows = await readmeTable();
    const classes = exportedErrorClasses();
    const fromClasses = new Map([...classes].map(([name, C]) => [C.code as string, name]));
    assert.deepEqual([...rows].sort(), [...fromClasses].sort());
  });

  it('the gRPC status is grpcCode; code is the string code (a real NOT_FOUND from etcd)', async () => {
    await assert.rejects(client.put(`${fresh('grpc')}k`, 'v', { lease: 0x0bad_1eafn }), (err: unknown) => {
      assert.ok(err instanceof LeaseNotFoundError, String(err));
      assert.equal(err.code, 'ERR_ETCD_LEASE_NOT_FOUND');
      assert.equal(err.grpcCode, 5, 'NOT_FOUND');
      return true;
    });
    const e = new EtcdError('m', { grpcCode: 14 });
    assert.equal(e.grpcCode, 14);
    assert.equal(e.code, 'ERR_ETCD');
  });
});

describe('lost errors carry reason', { timeout: 60_000 }, () => {
  it('a deleted lock key: key_deleted; after unlock: released', async () => {
    const p = fresh('deleted');
    const s = await Session.create(client);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      const lost = aborted(h.signal);
      await client.delete(h.key);
      const err = await lost;
      assert.ok(err instanceof LockLostError, String(err));
      assert.equal(err.code, 'ERR_LOCK_LOST');
      assert.equal(err.reason, 'key_deleted');
      assert.throws(
        () => h.assertHeld(),
        (e: unknown) => e instanceof LockLostError && e.reason === 'key_deleted',
      );
      await h.unlock();

      const again = await new Mutex(s, `${p}lock`).lock();
      const watched = again.signal;
      await again.unlock();
      assert.ok(watched.reason instanceof OwnershipLostError);
      assert.equal(watched.reason.reason, 'released');
    } finally {
      await s.close();
    }
  });

  it('a closed session: session_closed; a proclaim after the leader key went: NotLeaderError, key_deleted', async () => {
    const p = fresh('session');
    const s = await Session.create(client);
    const h = await new Mutex(s, `${p}lock`).lock();
    const lost = aborted(h.signal);
    await s.close();
    const err = await lost;
    assert.ok(err instanceof LockLostError, String(err));
    assert.equal(err.reason, 'session_closed');

    const s2 = await Session.create(client);
    try {
      const leader = await new Election(s2, `${p}election`).campaign('v1');
      await client.delete(leader.key);
      await assert.rejects(leader.proclaim('v2'), (e: unknown) => {
        assert.ok(e instanceof NotLeaderError, String(e));
        assert.ok(e instanceof LeadershipLostError);
        assert.equal(e.code, 'ERR_NOT_LEADER');
        assert.equal(e.reason, 'key_deleted');
        return true;
      });
      await leader.resign();
    } finally {
      await s2.close();
    }
  });
});
