import { InvalidArgumentError } from './errors.js';

/** One etcd endpoint, normalised: the gRPC target and whether it wants TLS. */
export interface Endpoint {
  /** `host:port` as gRPC dials it. */
  readonly target: string;
  /** Whether the URL said https. */
  readonly secure: boolean;
}

const DEFAULT_PORT = 2379;

/** A user name and password before the host: `user:password@` after the scheme, if any. */
const USERINFO = /^((?:[a-z][a-z0-9+.-]*:\/\/)?)[^/@]*@/i;

/**
 * An endpoint as messages may show it: with any `user:password@` replaced by `…@`, so that a
 * password written into an endpoint is never printed or logged.
 */
export function shownEndpoint(raw: string): string {
  return raw.replace(USERINFO, '$1…@');
}

/**
 * Parses `host:port`, `http(s)://host:port` and `[v6]:port` the way etcdctl does, so the same
 * ETCDCTL_ENDPOINTS value works for both. A comma-separated string is split. A user name or
 * password in an endpoint is refused (etcdctl ignores it silently); messages never show it.
 */
export function parseEndpoints(input: string | readonly string[]): Endpoint[] {
  const list = (typeof input === 'string' ? input.split(',') : input).map((s) => s.trim()).filter((s) => s !== '');
  if (list.length === 0) {
    throw new InvalidArgumentError('no etcd endpoint given; pass endpoints like "127.0.0.1:2379"');
  }
  const out = list.map(parseEndpoint);
  if (new Set(out.map((e) => e.secure)).size > 1) {
    throw new InvalidArgumentError(`endpoints mix http and https (${list.map(shownEndpoint).join(', ')}); use one scheme for all`);
  }
  return out;
}

export function parseEndpoint(raw: string): Endpoint {
  const shown = shownEndpoint(raw);
  if (shown !== raw) {
    throw new InvalidArgumentError(
      `endpoint "${shown}" has a user name or password in it; give credentials as the client's auth option (the CLI's --user), not in the endpoint`,
    );
  }
  let rest = raw;
  let secure = false;
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(rest);
  if (scheme) {
    const s = scheme[1]!.toLowerCase();
    if (s !== 'http' && s !== 'https') {
      throw new InvalidArgumentError(`endpoint "${raw}" has scheme ${s}; use http://, https:// or host:port`);
    }
    secure = s === 'https';
    rest = rest.slice(scheme[0].length).replace(/\/+$/, '');
  }
  if (rest.includes('/')) throw new InvalidArgumentError(`endpoint "${raw}" has a path; use host:port`);
  let host: string;
  let port: string | undefined;
  const v6 = /^\[([^\]]+)\](?::(.*))?$/.exec(rest);
  if (v6) {
    host = `[${v6[1]}]`;
    port = v6[2];
  } else {
    const i = rest.lastIndexOf(':');
    if (i >= 0 && rest.indexOf(':') !== i) {
      throw new InvalidArgumentError(`endpoint "${raw}": write IPv6 addresses in brackets, like [::1]:2379`);
    }
    host = i >= 0 ? rest.slice(0, i) : rest;
    port = i >= 0 ? rest.slice(i + 1) : undefined;
  }
  if (host === '' || host === '[]') throw new InvalidArgumentError(`endpoint "${raw}" has no host; use host:port`);
  const n = port === undefined || port === '' ? DEFAULT_PORT : /^\d{1,5}$/.test(port) ? Number(port) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 65535) {
    throw new InvalidArgumentError(`endpoint "${raw}" has an invalid port; use a number from 1 to 65535`);
  }
  return { target: `${host}:${n}`, secure };
}
