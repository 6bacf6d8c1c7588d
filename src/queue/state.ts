// The queue engine's state: one object per client, made on first use and closed with the client.
// Nothing else in src/queue keeps state beyond one call: each idea's registry is a small class of its
// own module, and this file only puts them together.
import type { Attachment, AttachmentKey } from '../client/attachments.js';
import type { Client } from '../client/client.js';
import type { Session } from '../session.js';
import { InFlightDeletes } from './deletes.js';
import { Gates } from './gate.js';
import { QueueHints } from './hints.js';
import { Holdings } from './holdings.js';
import { KeptWatches } from './kept-watches.js';
import { KeyUsers } from './key-users.js';
import { LateSweeper } from './late-sweeper.js';
import { QueueViews } from './queue-view.js';
import { Rechecker } from './recheck.js';
import { Scopes } from './scope.js';
import { WatchTrust } from './watch-trust.js';

/** What the engine keeps of one session. */
export class SessionQueue<H = unknown> {
  /** The calls of this process on each key, counted (see key-users.ts). */
  readonly users = new KeyUsers();
  /** Deletes still in flight or retried, which an enqueue waits for (see deletes.ts). */
  readonly deletes = new InFlightDeletes();
  /** Keys whose create may land late, swept once given up (see late-sweeper.ts). */
  readonly late = new LateSweeper();
  /** In-process turns per key (see gate.ts). */
  readonly gates = new Gates();
  /** Live holdings per key (see ownership.ts). */
  readonly holdings = new Holdings<H>();
}

/** The queue engine's state on one client. */
export class QueueState implements Attachment {
  /** Per session: a session belongs to one client, and its state goes with it. */
  private readonly sessions = new WeakMap<Session, SessionQueue>();
  /** Queue lengths last counted, per prefix (see hints.ts). */
  readonly hints = new QueueHints();
  /** The waiters' batched safety net (see recheck.ts). */
  readonly rechecker: Rechecker;
  /** Watches kept for a session's next wait on the same key (see kept-watches.ts). */
  readonly kept = new KeptWatches();
  /** Scopes by name (see scope.ts). */
  readonly scopes = new Scopes();
  /** Views of long queues, so that joining one reads nothing (see queue-view.ts). */
  readonly views: QueueViews;
  /** Whether the members' watches lose no event (see watch-trust.ts). */
  readonly watchTrust: WatchTrust;

  constructor(client: Client) {
    this.rechecker = new Rechecker(client);
    this.watchTrust = new WatchTrust(client);
    this.views = new QueueViews(client, () => this.watchTrust.lossless());
  }

  of<H = unknown>(session: Session): SessionQueue<H> {
    let q = this.sessions.get(session);
    if (!q) this.sessions.set(session, (q = new SessionQueue()));
    return q as SessionQueue<H>;
  }

  close(): void {
    this.rechecker.close();
    this.kept.close();
    this.views.close();
  }
}

const QUEUE_STATE: AttachmentKey<QueueState, Client> = { name: 'queue', create: (client) => new QueueState(client) };

/** The queue engine's state on `client`. */
export function queueOf(client: Client): QueueState {
  return client.attached(QUEUE_STATE);
}

/** What the engine keeps of `session` (on its client's state). */
export function sessionQueue<H = unknown>(session: Session): SessionQueue<H> {
  return queueOf(session.client).of<H>(session);
}
