// What each simulated process has heard from the cluster, for the oracle: the revision of the last
// answer or stream message it received, and when it first received each watch event. A grant is
// judged against what its process knew (the answer that proved it is the last one received: the
// library resolves in the same turn), and a holder against the events that told its process it lost.
import type { Transport } from '../../client/transport/transport.js';
import type { Proc } from './time.js';

interface Heard {
  /** The header revision of the last answer or stream message received. */
  revision: bigint | undefined;
  /** When a watch event (`<key> <revision>`) first reached the process. */
  readonly events: Map<string, number>;
}

const heard = new WeakMap<Proc, Heard>();

function of(proc: Proc): Heard {
  let h = heard.get(proc);
  if (!h) heard.set(proc, (h = { revision: undefined, events: new Map() }));
  return h;
}

/** The header revision of the last answer or stream message `proc` received. */
export function lastHeard(proc: Proc): bigint | undefined {
  return heard.get(proc)?.revision;
}

/** When `proc` first received the watch event of `key` at `revision`, if it did. */
export function heardEvent(proc: Proc, key: string, revision: bigint): number | undefined {
  return heard.get(proc)?.events.get(`${key} ${revision}`);
}

interface Message {
  header?: { revision?: bigint };
  events?: { kv?: { key?: Uint8Array; modRevision?: bigint } }[];
}

/**
 * The transports of `proc`'s Client, listened to. Neither the answers nor their timing change: an
 * answer's reaction is registered before the library's own, so it runs first, in the same turn.
 */
export function listened(make: (target: string) => Transport, proc: Proc): (target: string) => Transport {
  const h = of(proc);
  const note = (m: unknown): void => {
    const msg = m as Message | undefined;
    const rev = msg?.header?.revision;
    if (rev !== undefined && rev > 0n) h.revision = rev;
    for (const e of msg?.events ?? []) {
      if (!e.kv?.key || e.kv.modRevision === undefined) continue;
      const key = Buffer.isBuffer(e.kv.key) ? e.kv.key : Buffer.from(e.kv.key);
      const id = `${key.toString('latin1')} ${e.kv.modRevision}`;
      if (!h.events.has(id)) h.events.set(id, performance.now());
    }
  };
  return (target) => {
    const t = make(target);
    return {
      get isReady() {
        return t.isReady;
      },
      connect: (deadline, signal) => t.connect(deadline, signal),
      unary(method, request, headers, deadline, signal) {
        const answer = t.unary(method, request, headers, deadline, signal);
        answer.then(note, () => {});
        return answer;
      },
      stream(method, headers) {
        const s = t.stream(method, headers);
        s.on('data', note);
        return s;
      },
      close: () => t.close(),
    };
  };
}
