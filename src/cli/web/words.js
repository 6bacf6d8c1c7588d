// @ts-check
// The web inspector's words: durations, times, labels and sentences, from the server's views and
// events. Pure functions; app.js builds the page with them.

/** `n` as text, zero-padded to `w` digits. */
export function pad(n, w) {
  n = String(n);
  while (n.length < w) n = `0${n}`;
  return n;
}
/** A duration for people: "4.2 s", "12 s", "3 min 05 s", "1 h 02 min". */
export function dur(ms) {
  if (!(ms > 0)) ms = 0;
  if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
  let s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  let m = Math.floor(s / 60);
  s = s % 60;
  if (m < 60) return `${m} min ${pad(s, 2)} s`;
  const h = Math.floor(m / 60);
  m = m % 60;
  return `${h} h ${pad(m, 2)} min`;
}
/** The wall-clock time of `t` (server time) as hh:mm:ss.d, `offset` being server minus local time. */
export function clock(t, offset) {
  const d = new Date(t - offset);
  return `${pad(d.getHours(), 2)}:${pad(d.getMinutes(), 2)}:${pad(d.getSeconds(), 2)}.${Math.floor(d.getMilliseconds() / 100)}`;
}
/** Orders fencing tokens (decimal strings of any length) as numbers. */
export function cmpToken(a, b) {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
/** A stable colour hue for a token. */
export function hue(token) {
  let h = 0;
  for (let i = 0; i < token.length; i++) h = (h * 31 + token.charCodeAt(i)) % 360;
  return h;
}
/** What an entity of `kind` calls the one that holds it. */
export function holderWord(kind) {
  return kind === 'election' ? 'leader' : kind === 'semaphore' ? 'permit holder' : kind === 'barrier' ? 'member' : 'holder';
}
/** The badge of an entity's view. */
export function kindLabel(v) {
  if (v.kind === 'semaphore')
    return v.permits === undefined ? 'semaphore' : `semaphore · ${v.permits}${v.permits === 1 ? ' permit' : ' permits'}`;
  if (v.kind === 'rwlock') return 'readers-writer lock';
  if (v.kind === 'barrier') return 'double barrier';
  if (v.kind === 'lock-or-election') return 'lock or election';
  return v.kind;
}
/** The badge's tooltip, where the kind needs explaining. */
export function kindTitle(v) {
  if (v.kind === 'lock-or-election')
    return 'the keys cannot tell a lock with labels from an election with proposals until a leader proclaims: name the elections with --elections';
  return '';
}
/** Whether participant `p` belongs to the key layout of view `v` (its queue, not keys of another layout). */
export function inLayout(v, p) {
  return v.layout === 'rw'
    ? p.layout === 'read' || p.layout === 'write'
    : v.layout === 'member'
      ? p.layout === 'member'
      : p.layout === 'plain';
}
/** The word for participant `p` of view `v` in the holders' table. */
export function roleOf(v, p) {
  if (v.kind === 'election') return 'leader';
  if (v.kind === 'semaphore') return 'permit';
  if (v.kind === 'rwlock') return p.layout === 'write' ? 'writer' : 'reader';
  if (v.kind === 'barrier') return 'member';
  return 'holder';
}
/** A timeline event as a sentence. */
export function describe(ev) {
  const who = `token ${ev.token} (lease ${ev.lease})`;
  let election = ev.kind === 'election',
    s;
  if (ev.type === 'acquired') {
    s =
      (election
        ? 'leads: '
        : ev.kind === 'semaphore'
          ? 'takes a permit: '
          : ev.kind === 'barrier'
            ? 'enters: '
            : ev.kind === 'lock-or-election'
              ? 'holds: '
              : 'takes the lock: ') + who;
    if (ev.from) s += `, handed over from token ${ev.from.token}${ev.gapMs ? ` after ${dur(ev.gapMs)}` : ' at once'}`;
    else if (ev.gapMs !== undefined) s += ` after no ${holderWord(ev.kind)} for ${dur(ev.gapMs)}`;
  } else if (ev.type === 'released') {
    s =
      (election ? 'resigned: ' : ev.kind === 'barrier' ? 'left: ' : 'released: ') +
      who +
      (ev.heldMs !== undefined ? ` after ${election ? 'leading ' : 'holding '}${dur(ev.heldMs)}` : '');
  } else if (ev.type === 'detached') {
    s =
      `overwritten without a lease: ${who}${ev.heldMs !== undefined ? ` after ${election ? 'leading ' : 'holding '}${dur(ev.heldMs)}` : ''}` +
      '; its key stays, as a stray key';
  } else {
    s = `lease expired: ${who}${ev.heldMs !== undefined ? ` after ${election ? 'leading ' : 'holding '}${dur(ev.heldMs)}` : ''}`;
  }
  if (ev.approximate) s += ' (seen on reconnecting)';
  if (ev.value !== undefined) s += ` · value ${JSON.stringify(ev.value)}`;
  return s;
}
