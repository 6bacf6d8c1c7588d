// The web inspector's page: one HTML document, one script and one style sheet, served as they are
// (no build step, nothing from a CDN). The script builds every element with textContent, never
// innerHTML, so names, keys and values are always shown as text, never parsed as HTML.
//
// The script is plain ES2020 inside String.raw: it must contain no backtick and no dollar-brace.

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>etcd-concurrency inspector</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="app.css">
</head>
<body>
<header>
  <h1>etcd-concurrency <span class="light">inspector</span></h1>
  <span id="prefix" class="prefix"></span>
  <span id="status" class="status connecting">connecting…</span>
</header>
<div id="notice" class="notice" hidden></div>
<main>
  <section id="entities" aria-label="Locks, semaphores, readers-writer locks and elections"></section>
  <aside>
    <h2>Timeline</h2>
    <p class="hint">Hand-overs and terms, newest first. Times are when the inspector saw them.</p>
    <ol id="timeline"></ol>
  </aside>
</main>
<script src="app.js"></script>
</body>
</html>
`;

export const PAGE_CSS = String.raw`
:root { --fg: #1d2330; --dim: #6b7385; --line: #e3e6ec; --bg: #f6f7f9; --card: #fff; --accent: #2f6fde;
  --ok: #1f9d55; --warn: #c27c0e; --bad: #d0342c; --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 16px; padding: 12px 20px; background: var(--card); border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 2; }
h1 { font-size: 17px; margin: 0; font-weight: 650; }
h1 .light { font-weight: 400; color: var(--dim); }
h2 { font-size: 14px; margin: 0 0 4px; }
.prefix { font-family: var(--mono); color: var(--dim); }
.status { margin-left: auto; padding: 3px 10px; border-radius: 12px; font-weight: 600; font-size: 12.5px; }
.status.live { background: #e4f5ea; color: var(--ok); }
.status.live::before { content: "● "; }
.status.down, .status.connecting { background: #fde8e7; color: var(--bad); }
.notice { margin: 12px 20px 0; padding: 10px 14px; border-radius: 6px; background: #fde8e7; color: var(--bad); font-weight: 600; }
main { display: grid; grid-template-columns: minmax(0, 1fr) 380px; gap: 18px; padding: 16px 20px; align-items: start; }
@media (max-width: 1000px) { main { grid-template-columns: 1fr; } }
aside { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; position: sticky; top: 64px; max-height: calc(100vh - 84px); overflow: auto; }
.hint { color: var(--dim); font-size: 12px; margin: 0 0 8px; }
.empty { color: var(--dim); padding: 24px; text-align: center; border: 1px dashed var(--line); border-radius: 8px; background: var(--card); }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-bottom: 14px; }
.card.free { opacity: .75; }
.card .head { display: flex; align-items: baseline; gap: 10px; flex-wrap: wrap; }
.card .name { font-family: var(--mono); font-weight: 650; font-size: 14.5px; word-break: break-all; }
.badge { font-size: 11.5px; padding: 1px 8px; border-radius: 10px; background: #eef2fb; color: var(--accent); font-weight: 600; white-space: nowrap; }
.badge.election { background: #f3ecfb; color: #7b3fc4; }
.badge.lock-or-election { background: #f1f2f5; color: #4a5060; }
.badge.semaphore { background: #e9f6f6; color: #147a7a; }
.badge.rwlock { background: #fbf1e6; color: #a35d0b; }
.summary { color: var(--dim); }
.summary.vacant { color: var(--warn); font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin-top: 8px; font-size: 13px; }
th { text-align: left; font-weight: 600; color: var(--dim); font-size: 11.5px; text-transform: uppercase; letter-spacing: .03em; padding: 4px 8px; border-bottom: 1px solid var(--line); }
td { padding: 4px 8px; border-bottom: 1px solid #f0f1f4; white-space: nowrap; }
td.mono { font-family: var(--mono); }
td.value { white-space: normal; word-break: break-all; font-family: var(--mono); color: var(--dim); }
tr.holder td { background: #f0f7ff; }
tr.holder td.role { color: var(--accent); font-weight: 700; }
td.role { font-weight: 600; }
.warn { color: var(--warn); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
.dim { color: var(--dim); }
button.more { margin-top: 6px; border: 1px solid var(--line); background: var(--bg); border-radius: 6px; padding: 3px 10px; cursor: pointer; font: inherit; font-size: 12.5px; }
.bar { position: relative; height: 14px; margin-top: 10px; background: repeating-linear-gradient(45deg, #f7f0e4, #f7f0e4 4px, #fbf7ef 4px, #fbf7ef 8px); border-radius: 3px; overflow: hidden; }
.bar .term { position: absolute; top: 0; bottom: 0; border-right: 2px solid #fff; }
.axis { display: flex; justify-content: space-between; color: var(--dim); font-size: 11px; }
#timeline { list-style: none; margin: 0; padding: 0; }
#timeline li { padding: 6px 0; border-bottom: 1px solid #f0f1f4; }
#timeline .when { font-family: var(--mono); color: var(--dim); font-size: 12px; margin-right: 6px; }
#timeline .what { font-family: var(--mono); font-size: 12.5px; word-break: break-all; }
#timeline .text { display: block; }
#timeline li.gap { color: var(--warn); font-weight: 600; }
#timeline li.acquired .text::before { content: "▶ "; color: var(--ok); }
#timeline li.released .text::before { content: "■ "; color: var(--dim); }
#timeline li.expired .text::before { content: "✖ "; color: var(--bad); }
`;

export const PAGE_JS = String.raw`(function () {
  'use strict';
  var S = {
    entities: new Map(), leases: new Map(), timeline: [], offset: 0,
    sse: false, etcd: false, error: '', prefix: '', showValues: false, revision: '0', startedAt: Date.now(), loaded: false
  };
  var WAITERS_SHOWN = 20;
  /** The bars span the time since the inspector started, from 30 s to 5 min. */
  function span() { return Math.min(300000, Math.max(30000, now() - S.startedAt)); }
  var expanded = new Set();
  var live = [];
  /** The timeline by name, built once per render (each bar redraws four times a second). */
  var byName = new Map();
  var scheduled = false;
  var hook = { revision: '0', renderedAt: 0, renders: 0, entities: 0 };
  window.__inspector = hook;

  function now() { return Date.now() + S.offset; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function pad(n, w) { n = String(n); while (n.length < w) n = '0' + n; return n; }
  function dur(ms) {
    if (!(ms > 0)) ms = 0;
    if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
    var s = Math.floor(ms / 1000);
    if (s < 60) return s + ' s';
    var m = Math.floor(s / 60); s = s % 60;
    if (m < 60) return m + ' min ' + pad(s, 2) + ' s';
    var h = Math.floor(m / 60); m = m % 60;
    return h + ' h ' + pad(m, 2) + ' min';
  }
  function clock(t) {
    var d = new Date(t - S.offset);
    return pad(d.getHours(), 2) + ':' + pad(d.getMinutes(), 2) + ':' + pad(d.getSeconds(), 2) + '.' + Math.floor(d.getMilliseconds() / 100);
  }
  function cmpToken(a, b) { return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0); }
  function hue(token) { var h = 0; for (var i = 0; i < token.length; i++) h = (h * 31 + token.charCodeAt(i)) % 360; return h; }

  // ── state ──────────────────────────────────────────────────────────────────────────────────
  function entity(name) {
    var e = S.entities.get(name);
    if (!e) { e = { view: { name: name, kind: 'lock', layout: 'plain', holders: [], vacantSince: null }, parts: new Map() }; S.entities.set(name, e); }
    return e;
  }
  function clockFrom(d) { if (typeof d.now === 'number') S.offset = d.now - Date.now(); }
  function setLeases(m) {
    Object.keys(m || {}).forEach(function (hex) { if (m[hex] === null) S.leases.delete(hex); else S.leases.set(hex, m[hex]); });
  }
  function onSnapshot(d) {
    clockFrom(d);
    S.entities = new Map(); S.leases = new Map();
    S.prefix = d.prefix; S.showValues = d.showValues; S.startedAt = d.startedAt;
    d.entities.forEach(function (v) {
      var e = entity(v.name); e.parts = new Map();
      (v.parts || []).forEach(function (p) { e.parts.set(p.key, p); });
      delete v.parts; e.view = v;
    });
    setLeases(d.leases);
    S.timeline = d.timeline;
    S.loaded = true;
    onStatus(d);
  }
  function onUpdate(d) {
    clockFrom(d);
    d.parts.forEach(function (op) {
      if (op.op === 'put') { delete op.op; entity(op.name).parts.set(op.key, op); }
      else { var e = S.entities.get(op.name); if (e) e.parts.delete(op.key); }
    });
    d.entities.forEach(function (v) { entity(v.name).view = v; });
    d.dropped.forEach(function (n) { S.entities.delete(n); });
    setLeases(d.leases);
    if (d.timeline.length) { S.timeline = S.timeline.concat(d.timeline); if (S.timeline.length > 500) S.timeline = S.timeline.slice(-500); }
    S.revision = d.revision;
    schedule();
  }
  function onStatus(d) {
    clockFrom(d);
    S.etcd = d.connected; S.error = d.error || ''; S.revision = d.revision;
    schedule();
  }

  var source;
  function connect() {
    source = new EventSource('events');
    source.addEventListener('snapshot', function (m) { S.sse = true; onSnapshot(JSON.parse(m.data)); });
    source.addEventListener('update', function (m) { onUpdate(JSON.parse(m.data)); });
    source.addEventListener('status', function (m) { onStatus(JSON.parse(m.data)); });
    source.addEventListener('leases', function (m) { var d = JSON.parse(m.data); clockFrom(d); setLeases(d.leases); schedule(); });
    source.onerror = function () {
      S.sse = false; schedule();
      // The browser retries by itself while the stream is CONNECTING; a CLOSED one we reopen.
      if (source.readyState === 2) { source.close(); setTimeout(connect, 2000); }
    };
  }

  // ── rendering ──────────────────────────────────────────────────────────────────────────────
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(function () { scheduled = false; render(); });
  }
  function holderWord(kind) {
    return kind === 'election' ? 'leader' : kind === 'semaphore' ? 'permit holder' : kind === 'barrier' ? 'member' : 'holder';
  }
  function kindLabel(v) {
    if (v.kind === 'semaphore') return v.permits === undefined ? 'semaphore' : 'semaphore · ' + v.permits + (v.permits === 1 ? ' permit' : ' permits');
    if (v.kind === 'rwlock') return 'readers-writer lock';
    if (v.kind === 'barrier') return 'double barrier';
    if (v.kind === 'lock-or-election') return 'lock or election';
    return v.kind;
  }
  function kindTitle(v) {
    if (v.kind === 'lock-or-election') return 'the keys cannot tell a lock with labels from an election with proposals until a leader proclaims: name the elections with --elections';
    return '';
  }
  function inLayout(v, p) {
    return v.layout === 'rw' ? p.layout === 'read' || p.layout === 'write' : v.layout === 'member' ? p.layout === 'member' : p.layout === 'plain';
  }
  function ordered(e) {
    var held = new Set(e.view.holders);
    var holders = e.view.holders.map(function (k) { return e.parts.get(k); }).filter(Boolean);
    var waiting = [];
    e.parts.forEach(function (p) { if (!held.has(p.key) && inLayout(e.view, p)) waiting.push(p); });
    waiting.sort(function (a, b) { return cmpToken(a.token, b.token); });
    return { holders: holders, waiting: waiting };
  }
  function roleOf(v, p) {
    if (v.kind === 'election') return 'leader';
    if (v.kind === 'semaphore') return 'permit';
    if (v.kind === 'rwlock') return p.layout === 'write' ? 'writer' : 'reader';
    if (v.kind === 'barrier') return 'member';
    return 'holder';
  }
  function ttlCell(td, p, holding) {
    var l = S.leases.get(p.lease);
    td.className = 'mono';
    if (!l) { td.textContent = '…'; return; }
    if (l.ttl < 0) { td.textContent = 'expired'; td.className = 'mono bad'; return; }
    // etcd reports whole seconds, rounded down: the lease had between ttl and ttl + 1 left.
    var left = Math.min(l.granted, l.ttl + 0.5) - (now() - l.at) / 1000;
    if (left <= 0 && !holding) {
      // Still there after its known deadline: renewed since. Only holders' leases are asked again.
      td.textContent = 'renewed, ≤ ' + l.granted + ' s'; td.className = 'mono dim';
      td.title = 'the inspector asks etcd again only for holders';
      return;
    }
    if (left <= 0) { td.textContent = '≤ 0 s / ' + l.granted + ' s'; td.className = 'mono warn'; return; }
    td.textContent = Math.ceil(left) + ' s / ' + l.granted + ' s';
    if (left < Math.max(2, l.granted / 3)) td.className = 'mono warn';
  }
  function sinceCell(td, p, holding) {
    var t = holding ? p.heldSince : p.createdAt;
    var verb = holding ? 'held ' : 'waiting ';
    if (t === null || t === undefined) td.textContent = verb + '≥ ' + dur(now() - S.startedAt);
    else td.textContent = verb + dur(now() - t);
  }
  function row(v, p, role, holding) {
    var tr = el('tr', holding ? 'holder' : 'waiter');
    tr.dataset.key = p.key; tr.dataset.token = p.token; tr.dataset.role = holding ? 'holder' : 'waiting';
    tr.appendChild(el('td', 'role', role));
    var suffix = p.key.slice(v.name.length + 1);
    // Our keys and Go's end in the lease id; Go's readers-writer recipe uses a timestamp instead.
    var key = el('td', 'mono', suffix.indexOf(p.lease) >= 0 ? suffix : suffix + ' · lease ' + p.lease);
    key.title = p.key + ' on lease ' + p.lease;
    tr.appendChild(key);
    tr.appendChild(el('td', 'mono', p.token));
    var ttl = el('td'); ttlCell(ttl, p, holding); tr.appendChild(ttl);
    live.push(function () { ttlCell(ttl, p, holding); });
    var since = el('td'); sinceCell(since, p, holding); tr.appendChild(since);
    live.push(function () { sinceCell(since, p, holding); });
    if (S.showValues) tr.appendChild(el('td', 'value', p.value));
    return tr;
  }
  function summary(e, o) {
    var v = e.view, n = o.waiting.length, w = n + ' waiting';
    if (o.holders.length === 0) {
      if (v.vacantSince === null || v.vacantSince === undefined) return { text: 'free', vacant: true };
      return { live: function () { return 'free · no ' + holderWord(v.kind) + ' for ' + dur(now() - v.vacantSince); }, vacant: true };
    }
    var h = o.holders[0];
    if (v.kind === 'semaphore') return { text: o.holders.length + ' of ' + (v.permits === undefined ? '?' : v.permits) + ' permits held · ' + w };
    if (v.kind === 'rwlock') return { text: (h.layout === 'write' ? 'write-locked by token ' + h.token : 'read-locked by ' + o.holders.length + (o.holders.length === 1 ? ' reader' : ' readers')) + ' · ' + w };
    if (v.kind === 'barrier') return { text: o.holders.length + ' members in' };
    return { text: (v.kind === 'election' ? 'led by token ' : 'held by token ') + h.token + ' · ' + w };
  }
  function bar(e) {
    var v = e.view;
    var wrap = el('div');
    var b = el('div', 'bar');
    b.title = 'one colour per ' + (v.kind === 'election' ? 'term' : 'holder') + ', hatched where nobody ' + (v.kind === 'election' ? 'led' : 'held');
    wrap.appendChild(b);
    var axis = el('div', 'axis'), from = el('span');
    axis.appendChild(from);
    axis.appendChild(el('span', null, 'now'));
    wrap.appendChild(axis);
    function draw() {
      while (b.firstChild) b.removeChild(b.firstChild);
      var W = span(), t1 = now(), t0 = t1 - W, open = new Map(), terms = [];
      from.textContent = dur(W) + ' ago';
      (byName.get(v.name) || []).forEach(function (ev) {
        var k = ev.key + '@' + ev.token;
        if (ev.type === 'acquired') open.set(k, { token: ev.token, start: ev.at, end: t1 });
        else {
          var t = open.get(k);
          if (t) { t.end = ev.at; open.delete(k); terms.push(t); }
          else terms.push({ token: ev.token, start: ev.heldMs != null ? ev.at - ev.heldMs : t0, end: ev.at });
        }
      });
      open.forEach(function (t) { terms.push(t); });
      ordered(e).holders.forEach(function (p) {
        if (!open.has(p.key + '@' + p.token)) terms.push({ token: p.token, start: p.heldSince == null ? t0 : p.heldSince, end: t1 });
      });
      terms.forEach(function (t) {
        var s = Math.max(t.start, t0), f = Math.min(t.end, t1);
        if (f <= s) return;
        var seg = el('div', 'term');
        seg.style.left = ((s - t0) / W * 100) + '%';
        seg.style.width = Math.max(0.4, (f - s) / W * 100) + '%';
        seg.style.background = 'hsl(' + hue(t.token) + ' 60% 55%)';
        seg.title = 'token ' + t.token + ': ' + dur(f - s);
        b.appendChild(seg);
      });
    }
    draw();
    live.push(draw);
    return wrap;
  }
  function card(e) {
    var v = e.view, o = ordered(e);
    var c = el('div', 'card' + (o.holders.length === 0 ? ' free' : ''));
    c.dataset.name = v.name; c.dataset.kind = v.kind;
    var head = el('div', 'head');
    head.appendChild(el('span', 'name', v.name));
    var badge = el('span', 'badge ' + v.kind, kindLabel(v));
    badge.title = kindTitle(v);
    head.appendChild(badge);
    var s = summary(e, o), sum = el('span', 'summary' + (s.vacant ? ' vacant' : ''), s.text);
    if (s.live) { sum.textContent = s.live(); live.push(function () { sum.textContent = s.live(); }); }
    head.appendChild(sum);
    c.appendChild(head);
    if (o.holders.length + o.waiting.length > 0) {
      var t = el('table'), hr = el('tr');
      ['', 'key (lease id)', 'token', 'lease TTL', 'for'].concat(S.showValues ? ['value'] : []).forEach(function (h) { hr.appendChild(el('th', null, h)); });
      var thead = el('thead'); thead.appendChild(hr); t.appendChild(thead);
      var tb = el('tbody');
      o.holders.forEach(function (p) { tb.appendChild(row(v, p, roleOf(v, p), true)); });
      var shown = expanded.has(v.name) ? o.waiting : o.waiting.slice(0, WAITERS_SHOWN);
      shown.forEach(function (p, i) { tb.appendChild(row(v, p, '#' + (i + 1) + (p.layout === 'read' || p.layout === 'write' ? ' ' + p.layout : ''), false)); });
      t.appendChild(tb);
      c.appendChild(t);
      if (o.waiting.length > WAITERS_SHOWN) {
        var more = el('button', 'more', expanded.has(v.name) ? 'show the first ' + WAITERS_SHOWN + ' only' : 'show all ' + o.waiting.length + ' waiting');
        more.addEventListener('click', function () { if (expanded.has(v.name)) expanded.delete(v.name); else expanded.add(v.name); schedule(); });
        c.appendChild(more);
      }
    }
    if (v.kind === 'lock' || v.kind === 'election' || v.kind === 'lock-or-election') c.appendChild(bar(e));
    return c;
  }
  function describe(ev) {
    var who = 'token ' + ev.token + ' (lease ' + ev.lease + ')';
    var election = ev.kind === 'election', s;
    if (ev.type === 'acquired') {
      s = (election ? 'leads: ' : ev.kind === 'semaphore' ? 'takes a permit: ' : ev.kind === 'barrier' ? 'enters: ' : ev.kind === 'lock-or-election' ? 'holds: ' : 'takes the lock: ') + who;
      if (ev.from) s += ', handed over from token ' + ev.from.token + (ev.gapMs ? ' after ' + dur(ev.gapMs) : ' at once');
      else if (ev.gapMs !== undefined) s += ' after no ' + holderWord(ev.kind) + ' for ' + dur(ev.gapMs);
    } else if (ev.type === 'released') {
      s = (election ? 'resigned: ' : ev.kind === 'barrier' ? 'left: ' : 'released: ') + who + (ev.heldMs !== undefined ? ' after ' + (election ? 'leading ' : 'holding ') + dur(ev.heldMs) : '');
    } else {
      s = 'lease expired: ' + who + (ev.heldMs !== undefined ? ' after ' + (election ? 'leading ' : 'holding ') + dur(ev.heldMs) : '');
    }
    if (ev.approximate) s += ' (seen on reconnecting)';
    if (ev.value !== undefined) s += ' · value ' + JSON.stringify(ev.value);
    return s;
  }
  function timeline() {
    var ol = el('ol');
    ol.id = 'timeline';
    // Elections nobody leads now, with a history here: the gap so far, on top. (A free lock is the
    // normal state: its card says so, the timeline does not.)
    S.entities.forEach(function (e) {
      var v = e.view;
      if (v.kind !== 'election' || v.holders.length > 0 || v.vacantSince === null || v.vacantSince === undefined || !byName.has(v.name)) return;
      var li = el('li', 'gap');
      li.dataset.name = v.name;
      li.appendChild(el('span', 'when', 'now'));
      li.appendChild(el('span', 'what', v.name));
      var tx = el('span', 'text');
      function upd() { tx.textContent = 'no ' + holderWord(v.kind) + ' for ' + dur(now() - v.vacantSince); }
      upd(); live.push(upd);
      li.appendChild(tx);
      ol.appendChild(li);
    });
    for (var i = S.timeline.length - 1, n = 0; i >= 0 && n < 200; i--, n++) {
      var ev = S.timeline[i], li = el('li', ev.type);
      li.dataset.name = ev.name; li.dataset.type = ev.type; li.dataset.token = ev.token;
      li.appendChild(el('span', 'when', clock(ev.at)));
      li.appendChild(el('span', 'what', ev.name));
      li.appendChild(el('span', 'text', describe(ev)));
      ol.appendChild(li);
    }
    if (!ol.firstChild) ol.appendChild(el('li', 'dim', 'nothing yet'));
    return ol;
  }
  function render() {
    live = [];
    byName = new Map();
    S.timeline.forEach(function (ev) { var l = byName.get(ev.name); if (!l) byName.set(ev.name, l = []); l.push(ev); });
    var status = document.getElementById('status'), notice = document.getElementById('notice');
    var ok = S.sse && S.etcd;
    status.className = 'status ' + (ok ? 'live' : S.loaded ? 'down' : 'connecting');
    status.textContent = ok ? 'live · revision ' + S.revision : S.loaded ? 'disconnected, reconnecting…' : 'connecting…';
    if (!S.sse && S.loaded) { notice.hidden = false; notice.textContent = 'Disconnected from the inspector, reconnecting… (what is shown may be out of date)'; }
    else if (!S.etcd && S.loaded) { notice.hidden = false; notice.textContent = 'The inspector is disconnected from etcd, reconnecting…' + (S.error ? ' (' + S.error + ')' : ''); }
    else notice.hidden = true;
    document.getElementById('prefix').textContent = (S.prefix === '' ? 'every key' : 'prefix ' + JSON.stringify(S.prefix)) + (S.showValues ? ' · showing values' : ' · values hidden');
    var list = document.createDocumentFragment(), names = Array.from(S.entities.keys()).sort();
    names.forEach(function (n) { list.appendChild(card(S.entities.get(n))); });
    var section = document.getElementById('entities');
    section.replaceChildren(list);
    if (names.length === 0) section.appendChild(el('div', 'empty', S.loaded ? 'Nothing under this prefix yet: locks, semaphores, readers-writer locks and elections appear here as their keys do.' : 'Loading…'));
    document.getElementById('timeline').replaceWith(timeline());
    hook.revision = S.revision; hook.renderedAt = Date.now(); hook.renders++; hook.entities = names.length;
  }
  setInterval(function () { for (var i = 0; i < live.length; i++) live[i](); }, 250);
  connect();
  render();
})();
`;
