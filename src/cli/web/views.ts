// What the web inspector's server sends to the page (GET /state, and each server-sent event):
// the views of names and their participants, timeline events, and the changes of one update.

/**
 * What a name's keys look like. `lock-or-election`: one holder at a time, and the keys cannot say
 * which (a lock with a label and a candidate with a proposal look the same until one proclaims).
 */
export type Kind = 'lock' | 'election' | 'lock-or-election' | 'semaphore' | 'rwlock' | 'barrier';

/** One participant key, as sent to the page. */
export interface PartView {
  key: string;
  name: string;
  /** `plain` for `<name>/<hex>`; a readers-writer lock's side; a double barrier's member. */
  layout: 'plain' | 'read' | 'write' | 'member';
  /** Lease id in hex; none for a stray key. */
  lease?: string;
  /**
   * In a participant's place, on no lease (an operator's plain put over a participant's key): never
   * a holder or a waiter; it stays until someone deletes it.
   */
  stray?: true;
  /** CreateRevision, decimal: the fencing token (a leader's term). */
  token: string;
  /** Wall-clock ms when the inspector saw the key created; null when it was there before it started watching. */
  createdAt: number | null;
  /** Wall-clock ms when this participant became a holder (null: before the inspector knew). */
  heldSince?: number | null;
  /** The value, only with --show-values. */
  value?: string;
}

/** The state of one name, without its participants: the page sorts those by token. */
export interface EntityView {
  name: string;
  kind: Kind;
  /** A semaphore's permit count. */
  permits?: number;
  /** Which participants count (others under the name are ignored, as `inspect` does). */
  layout: 'plain' | 'rw' | 'member';
  /** Keys of the holders, oldest first; the other participants of the layout wait, by token. */
  holders: string[];
  /** Wall-clock ms since nobody holds (null while someone holds). */
  vacantSince: number | null;
  /** Participants (only in snapshots; updates carry participant operations instead). */
  parts?: PartView[];
}

export interface TimelineEvent {
  /** Sequence number, increasing. */
  seq: number;
  at: number;
  name: string;
  kind: Kind;
  /** detached: the holder's key was written over without a lease (it stays, as a stray key). */
  type: 'acquired' | 'released' | 'expired' | 'detached';
  key: string;
  lease: string;
  token: string;
  /** acquired: the previous holder (a hand-over), when one released in the same change. */
  from?: { key: string; token: string };
  /** acquired: how long nobody held before (ms), when known. */
  gapMs?: number;
  /** released/expired: how long it held (ms), when known. */
  heldMs?: number;
  /** True when the time is only known to be at most this (found on a resync after an outage). */
  approximate?: boolean;
  value?: string;
}

export type PartOp = ({ op: 'put' } & PartView) | { op: 'del'; key: string; name: string };

/** What one batch of changes did, for the page. */
export interface Change {
  parts: PartOp[];
  entities: EntityView[];
  /** Names with no participant left for longer than the model keeps them. */
  dropped: string[];
  timeline: TimelineEvent[];
  /** Leases first seen (fetch their TimeToLive) and leases whose keys changed (fetch it again). */
  leasesNew: string[];
  leasesChanged: string[];
  /** Leases with no key left. */
  leasesGone: string[];
}
