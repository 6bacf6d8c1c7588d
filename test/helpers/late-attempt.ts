// A write attempt whose answer is lost and that lands later, then a retry the member refuses: what a
// slow member followed by a stricter one (or a changed permission) does to one call, on a real etcd.
import type { Client } from '../../src/index.js';
import type * as pb from '../../src/proto/etcd.js';
import { Status, type Transport, TransportError } from '../../src/client/transport/transport.js';

/** What {@link holdThenRefuse} hands a test. */
export interface HeldAttempt {
  /** How many matching Txns were held or refused so far (at most 2; later ones go as they are). */
  readonly attempts: number;
  /** The held attempt's request (after the first match). */
  readonly request: pb.TxnRequest | undefined;
  /** Sends the held attempt to etcd for real, now: it lands late. */
  land(): Promise<pb.TxnResponse>;
  /** Puts the transport back as it was. */
  restore(): void;
}

/**
 * Makes the member behind `client`'s first endpoint answer the first Txn that `matches` like a slow
 * member (no answer in time: the attempt is held here, to be sent later with `land`) and the second
 * like a stricter one (`refusal`, the member's own answer). Every other request goes as it is.
 */
export function holdThenRefuse(client: Client, matches: (r: pb.TxnRequest) => boolean, refusal: () => TransportError): HeldAttempt {
  const t = (client.conn as unknown as { peers: Transport[] }).peers[0]!;
  const unary = t.unary.bind(t);
  let attempts = 0;
  let request: pb.TxnRequest | undefined;
  let land: (() => Promise<pb.TxnResponse>) | undefined;
  t.unary = ((method, req, headers, deadline, signal) => {
    if (!method.path.endsWith('/Txn') || attempts >= 2 || !matches(req as pb.TxnRequest))
      return unary(method, req, headers, deadline, signal);
    attempts++;
    if (attempts === 1) {
      request = req as pb.TxnRequest;
      land = () => unary(method, req, headers, performance.now() + 10_000) as Promise<pb.TxnResponse>;
      return Promise.reject(new TransportError(Status.DEADLINE_EXCEEDED, 'no answer within the deadline'));
    }
    return Promise.reject(refusal());
  }) as typeof t.unary;
  return {
    get attempts() {
      return attempts;
    },
    get request() {
      return request;
    },
    land: () => {
      if (!land) throw new Error('no attempt was held');
      return land();
    },
    restore: () => {
      t.unary = unary;
    },
  };
}
