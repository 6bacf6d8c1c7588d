import * as rpc from './methods.js';
import type { Connection, TokenProvider } from './connection.js';

export interface AuthOptions {
  username: string;
  password: string;
}

/**
 * Fetches etcd's simple or JWT token with the user's password, shares one request among concurrent
 * callers, and fetches again when the server says the token expired (etcd 17623): long waits
 * therefore survive token expiry.
 */
export class TokenSource implements TokenProvider {
  private current?: string;
  private inflight?: Promise<string>;

  constructor(
    private readonly conn: Connection,
    private readonly auth: AuthOptions,
  ) {}

  token(signal?: AbortSignal): Promise<string> | string {
    if (this.current !== undefined) return this.current;
    this.inflight ??= this.conn
      .unary(rpc.Auth.authenticate, { name: this.auth.username, password: this.auth.password }, 'idempotent', {
        signal,
        anonymous: true,
      })
      .then(
        (r) => {
          this.inflight = undefined;
          this.current = r.token ?? '';
          return this.current;
        },
        (err: unknown) => {
          this.inflight = undefined;
          throw err;
        },
      );
    return this.inflight;
  }

  invalidate(token?: string): void {
    if (token === undefined || token === this.current) this.current = undefined;
  }
}
