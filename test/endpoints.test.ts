// Parsing endpoints (src/client/endpoints.ts): pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseEndpoint, parseEndpoints } from '../src/client/endpoints.js';
import { InvalidArgumentError } from '../src/client/errors.js';

/** Asserts that `fn` throws InvalidArgumentError whose message matches `re`. */
function rejectsArg(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError, `expected InvalidArgumentError, got ${String(err)}`);
    assert.match(err.message, re);
    return true;
  });
}

describe('parseEndpoints', () => {
  it('accepts host:port as gRPC target, insecure', () => {
    assert.deepEqual(parseEndpoint('127.0.0.1:2379'), { target: '127.0.0.1:2379', secure: false });
  });

  it('defaults the port to 2379', () => {
    assert.deepEqual(parseEndpoint('localhost'), { target: 'localhost:2379', secure: false });
    assert.deepEqual(parseEndpoint('http://etcd.example'), { target: 'etcd.example:2379', secure: false });
  });

  it('takes the scheme (case-insensitively) to decide TLS and strips trailing slashes', () => {
    assert.deepEqual(parseEndpoint('https://etcd:2379/'), { target: 'etcd:2379', secure: true });
    assert.deepEqual(parseEndpoint('HTTP://Etcd:1234'), { target: 'Etcd:1234', secure: false });
  });

  it('accepts bracketed IPv6 with and without port', () => {
    assert.deepEqual(parseEndpoint('[::1]:23790'), { target: '[::1]:23790', secure: false });
    assert.deepEqual(parseEndpoint('https://[fe80::1]'), { target: '[fe80::1]:2379', secure: true });
  });

  it('rejects unbracketed IPv6 and tells how to write it', () => {
    rejectsArg(() => parseEndpoint('::1'), /brackets, like \[::1\]:2379/);
  });

  it('rejects other schemes, paths, missing hosts and bad ports, naming the endpoint', () => {
    rejectsArg(() => parseEndpoint('unix:///tmp/etcd.sock'), /"unix:\/\/\/tmp\/etcd.sock" has scheme unix/);
    rejectsArg(() => parseEndpoint('http://h:1/v3'), /"http:\/\/h:1\/v3" has a path/);
    rejectsArg(() => parseEndpoint(':2379'), /has no host/);
    rejectsArg(() => parseEndpoint('[]:2379'), /has no host/);
    for (const bad of ['h:0', 'h:65536', 'h:abc', 'h:1.5', 'h:-1']) {
      rejectsArg(() => parseEndpoint(bad), new RegExp(`"${bad}" has an invalid port; use a number from 1 to 65535`));
    }
  });

  it('rejects ports that are not plain decimal digits', () => {
    for (const bad of ['h:0x50', 'h:1e3', 'h: 80', 'h:0b1']) {
      rejectsArg(() => parseEndpoint(bad), /invalid port/);
    }
  });

  it('splits a comma-separated string and trims blanks, as ETCDCTL_ENDPOINTS', () => {
    assert.deepEqual(
      parseEndpoints(' a:1, b:2 ,,c ').map((e) => e.target),
      ['a:1', 'b:2', 'c:2379'],
    );
    assert.deepEqual(
      parseEndpoints(['http://x:1', 'y:2']).map((e) => e.target),
      ['x:1', 'y:2'],
    );
  });

  it('rejects an empty list with an example endpoint', () => {
    rejectsArg(() => parseEndpoints(''), /no etcd endpoint given; pass endpoints like "127.0.0.1:2379"/);
    rejectsArg(() => parseEndpoints(' , '), /no etcd endpoint given/);
    rejectsArg(() => parseEndpoints([]), /no etcd endpoint given/);
  });

  it('rejects a mix of http and https', () => {
    rejectsArg(() => parseEndpoints(['http://a:1', 'https://b:2']), /mix http and https/);
  });
});
