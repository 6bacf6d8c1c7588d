// @ts-check
// The web inspector's page script (served as it is at /app.js; no build step, nothing from a CDN).
// It builds every element with textContent, never innerHTML, so names, keys and values are always
// shown as text, never parsed as HTML. Type-checked by tsconfig.web.json (npm run typecheck).
import { clock, cmpToken, describe, dur, holderWord, hue, inLayout, kindLabel, kindTitle, roleOf } from './words.js';

(() => {
  const S = {
    entities: new Map(),
    leases: new Map(),
    timeline: /** @type {any[]} */ ([]),
    offset: 0,
    sse: false,
    etcd: false,
    error: '',
    prefix: '',
    showValues: false,
    revision: '0',
    startedAt: Date.now(),
    loaded: false,
  };
  const WAITERS_SHOWN = 20;
  const STRAY =
    "a key in a participant's place without a lease (written without one, e.g. etcdctl put over a holder's key): it holds nothing and nobody waits for it; it stays until deleted";
  /** The bars span the time since the inspector started, from 30 s to 5 min. */
  function span() {
    return Math.min(300000, Math.max(30000, now() - S.startedAt));
  }
  const expanded = new Set();
  /** @type {Array<() => void>} */
  let live = [];
  /** The timeline by name, built once per render (each bar redraws four times a second). */
  let byName = new Map();
  let scheduled = false;
  const hook = { revision: '0', renderedAt: 0, renders: 0, entities: 0 };
  /** @type {any} */ (window).__inspector = hook;

  function now() {
    return Date.now() + S.offset;
  }
  /** @param {string} id @returns {HTMLElement} */
  function byId(id) {
    const e = document.getElementById(id);
    if (!e) throw new Error(`the page has no #${id}`);
    return e;
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // ── state ──────────────────────────────────────────────────────────────────────────────────
  function entity(name) {
    let e = S.entities.get(name);
    if (!e) {
      e = { view: { name: name, kind: 'lock', layout: 'plain', holders: [], vacantSince: null }, parts: new Map() };
      S.entities.set(name, e);
    }
    return e;
  }
  function clockFrom(d) {
    if (typeof d.now === 'number') S.offset = d.now - Date.now();
  }
  function setLeases(m) {
    Object.keys(m || {}).forEach((hex) => {
      if (m[hex] === null) S.leases.delete(hex);
      else S.leases.set(hex, m[hex]);
    });
  }
  function onSnapshot(d) {
    clockFrom(d);
    S.entities = new Map();
    S.leases = new Map();
    S.prefix = d.prefix;
    S.showValues = d.showValues;
    S.startedAt = d.startedAt;
    d.entities.forEach((v) => {
      const e = entity(v.name);
      e.parts = new Map();
      (v.parts || []).forEach((p) => {
        e.parts.set(p.key, p);
      });
      delete v.parts;
      e.view = v;
    });
    setLeases(d.leases);
    S.timeline = d.timeline;
    S.loaded = true;
    onStatus(d);
  }
  function onUpdate(d) {
    clockFrom(d);
    d.parts.forEach((op) => {
      if (op.op === 'put') {
        delete op.op;
        entity(op.name).parts.set(op.key, op);
      } else {
        const e = S.entities.get(op.name);
        if (e) e.parts.delete(op.key);
      }
    });
    d.entities.forEach((v) => {
      entity(v.name).view = v;
    });
    d.dropped.forEach((n) => {
      S.entities.delete(n);
    });
    setLeases(d.leases);
    if (d.timeline.length) {
      S.timeline = S.timeline.concat(d.timeline);
      if (S.timeline.length > 500) S.timeline = S.timeline.slice(-500);
    }
    S.revision = d.revision;
    schedule();
  }
  function onStatus(d) {
    clockFrom(d);
    S.etcd = d.connected;
    S.error = d.error || '';
    S.revision = d.revision;
    schedule();
  }

  let source;
  function connect() {
    source = new EventSource('events');
    source.addEventListener('snapshot', (m) => {
      S.sse = true;
      onSnapshot(JSON.parse(m.data));
    });
    source.addEventListener('update', (m) => {
      onUpdate(JSON.parse(m.data));
    });
    source.addEventListener('status', (m) => {
      onStatus(JSON.parse(m.data));
    });
    source.addEventListener('leases', (m) => {
      const d = JSON.parse(m.data);
      clockFrom(d);
      setLeases(d.leases);
      schedule();
    });
    source.onerror = () => {
      S.sse = false;
      schedule();
      // The browser retries by itself while the stream is CONNECTING; a CLOSED one we reopen.
      if (source.readyState === 2) {
        source.close();
        setTimeout(connect, 2000);
      }
    };
  }

  // ── rendering ──────────────────────────────────────────────────────────────────────────────
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      render();
    });
  }
  function ordered(e) {
    const held = new Set(e.view.holders);
    const holders = e.view.holders.map((k) => e.parts.get(k)).filter(Boolean);
    const waiting = [];
    const stray = [];
    e.parts.forEach((p) => {
      if (p.stray) stray.push(p);
      else if (!held.has(p.key) && inLayout(e.view, p)) waiting.push(p);
    });
    waiting.sort((a, b) => cmpToken(a.token, b.token));
    stray.sort((a, b) => cmpToken(a.token, b.token));
    return { holders: holders, waiting: waiting, stray: stray };
  }
  function ttlCell(td, p, holding) {
    td.className = 'mono';
    if (p.stray) {
      td.textContent = 'no lease';
      td.className = 'mono dim';
      return;
    }
    const l = S.leases.get(p.lease);
    if (!l) {
      td.textContent = '…';
      return;
    }
    if (l.ttl < 0) {
      td.textContent = 'expired';
      td.className = 'mono bad';
      return;
    }
    // etcd reports whole seconds, rounded down: the lease had between ttl and ttl + 1 left.
    const left = Math.min(l.granted, l.ttl + 0.5) - (now() - l.at) / 1000;
    if (left <= 0 && !holding) {
      // Still there after its known deadline: renewed since. Only holders' leases are asked again.
      td.textContent = `renewed, ≤ ${l.granted} s`;
      td.className = 'mono dim';
      td.title = 'the inspector asks etcd again only for holders';
      return;
    }
    if (left <= 0) {
      td.textContent = `≤ 0 s / ${l.granted} s`;
      td.className = 'mono warn';
      return;
    }
    td.textContent = `${Math.ceil(left)} s / ${l.granted} s`;
    if (left < Math.max(2, l.granted / 3)) td.className = 'mono warn';
  }
  function sinceCell(td, p, holding) {
    if (p.stray) {
      td.textContent = '—';
      td.className = 'dim';
      return;
    }
    const t = holding ? p.heldSince : p.createdAt;
    const verb = holding ? 'held ' : 'waiting ';
    if (t === null || t === undefined) td.textContent = `${verb}≥ ${dur(now() - S.startedAt)}`;
    else td.textContent = verb + dur(now() - t);
  }
  function row(v, p, role, holding) {
    const tr = el('tr', p.stray ? 'stray' : holding ? 'holder' : 'waiter');
    tr.dataset.key = p.key;
    tr.dataset.token = p.token;
    tr.dataset.role = p.stray ? 'stray' : holding ? 'holder' : 'waiting';
    if (p.stray) tr.title = STRAY;
    tr.appendChild(el('td', 'role', role));
    const suffix = p.key.slice(v.name.length + 1);
    // Our keys and Go's end in the lease id; Go's readers-writer recipe uses a timestamp instead.
    const key = el('td', 'mono', p.stray || suffix.indexOf(p.lease) >= 0 ? suffix : `${suffix} · lease ${p.lease}`);
    key.title = p.stray ? `${p.key} on no lease` : `${p.key} on lease ${p.lease}`;
    tr.appendChild(key);
    tr.appendChild(el('td', 'mono', p.token));
    const ttl = el('td');
    ttlCell(ttl, p, holding);
    tr.appendChild(ttl);
    live.push(() => {
      ttlCell(ttl, p, holding);
    });
    const since = el('td');
    sinceCell(since, p, holding);
    tr.appendChild(since);
    live.push(() => {
      sinceCell(since, p, holding);
    });
    if (S.showValues) tr.appendChild(el('td', 'value', p.value));
    return tr;
  }
  /** The card's summary: who holds and how many wait, then the stray keys if any. */
  function summary(e, o) {
    const s = summaryOf(e.view, o, `${o.waiting.length} waiting`),
      n = o.stray.length;
    if (n === 0) return s;
    const more = ` · ${n} stray ${n === 1 ? 'key' : 'keys'}`,
      live = s.live;
    return live ? { live: () => live() + more, vacant: s.vacant } : { text: s.text + more, vacant: s.vacant };
  }
  /** @returns {{ text?: string, live?: () => string, vacant?: boolean }} */
  function summaryOf(v, o, w) {
    if (o.holders.length === 0) {
      if (v.vacantSince === null || v.vacantSince === undefined) return { text: 'free', vacant: true };
      return { live: () => `free · no ${holderWord(v.kind)} for ${dur(now() - v.vacantSince)}`, vacant: true };
    }
    const h = o.holders[0];
    if (v.kind === 'semaphore') return { text: `${o.holders.length} of ${v.permits === undefined ? '?' : v.permits} permits held · ${w}` };
    if (v.kind === 'rwlock')
      return {
        text: `${h.layout === 'write' ? `write-locked by token ${h.token}` : `read-locked by ${o.holders.length}${o.holders.length === 1 ? ' reader' : ' readers'}`} · ${w}`,
      };
    if (v.kind === 'barrier') return { text: `${o.holders.length} members in` };
    return { text: `${(v.kind === 'election' ? 'led by token ' : 'held by token ') + h.token} · ${w}` };
  }
  function bar(e) {
    const v = e.view;
    const wrap = el('div');
    const b = el('div', 'bar');
    b.title = `one colour per ${v.kind === 'election' ? 'term' : 'holder'}, hatched where nobody ${v.kind === 'election' ? 'led' : 'held'}`;
    wrap.appendChild(b);
    const axis = el('div', 'axis'),
      from = el('span');
    axis.appendChild(from);
    axis.appendChild(el('span', null, 'now'));
    wrap.appendChild(axis);
    function draw() {
      while (b.firstChild) b.removeChild(b.firstChild);
      const W = span(),
        t1 = now(),
        t0 = t1 - W,
        open = new Map(),
        terms = [];
      from.textContent = `${dur(W)} ago`;
      (byName.get(v.name) || []).forEach((ev) => {
        const k = `${ev.key}@${ev.token}`;
        if (ev.type === 'acquired') open.set(k, { token: ev.token, start: ev.at, end: t1 });
        else {
          const t = open.get(k);
          if (t) {
            t.end = ev.at;
            open.delete(k);
            terms.push(t);
          } else terms.push({ token: ev.token, start: ev.heldMs != null ? ev.at - ev.heldMs : t0, end: ev.at });
        }
      });
      open.forEach((t) => {
        terms.push(t);
      });
      ordered(e).holders.forEach((p) => {
        if (!open.has(`${p.key}@${p.token}`)) terms.push({ token: p.token, start: p.heldSince == null ? t0 : p.heldSince, end: t1 });
      });
      terms.forEach((t) => {
        const s = Math.max(t.start, t0),
          f = Math.min(t.end, t1);
        if (f <= s) return;
        const seg = el('div', 'term');
        seg.style.left = `${((s - t0) / W) * 100}%`;
        seg.style.width = `${Math.max(0.4, ((f - s) / W) * 100)}%`;
        seg.style.background = `hsl(${hue(t.token)} 60% 55%)`;
        seg.title = `token ${t.token}: ${dur(f - s)}`;
        b.appendChild(seg);
      });
    }
    draw();
    live.push(draw);
    return wrap;
  }
  function card(e) {
    const v = e.view,
      o = ordered(e);
    const c = el('div', `card${o.holders.length === 0 ? ' free' : ''}`);
    c.dataset.name = v.name;
    c.dataset.kind = v.kind;
    const head = el('div', 'head');
    head.appendChild(el('span', 'name', v.name));
    const badge = el('span', `badge ${v.kind}`, kindLabel(v));
    badge.title = kindTitle(v);
    head.appendChild(badge);
    const s = summary(e, o),
      sum = el('span', `summary${s.vacant ? ' vacant' : ''}`, s.text);
    if (s.live) {
      const text = s.live;
      sum.textContent = text();
      live.push(() => {
        sum.textContent = text();
      });
    }
    head.appendChild(sum);
    c.appendChild(head);
    if (o.holders.length + o.waiting.length + o.stray.length > 0) {
      const t = el('table'),
        hr = el('tr');
      ['', 'key (lease id)', 'token', 'lease TTL', 'for'].concat(S.showValues ? ['value'] : []).forEach((h) => {
        hr.appendChild(el('th', null, h));
      });
      const thead = el('thead');
      thead.appendChild(hr);
      t.appendChild(thead);
      const tb = el('tbody');
      o.holders.forEach((p) => {
        tb.appendChild(row(v, p, roleOf(v, p), true));
      });
      const shown = expanded.has(v.name) ? o.waiting : o.waiting.slice(0, WAITERS_SHOWN);
      shown.forEach((p, i) => {
        tb.appendChild(row(v, p, `#${i + 1}${p.layout === 'read' || p.layout === 'write' ? ` ${p.layout}` : ''}`, false));
      });
      o.stray.forEach((p) => {
        tb.appendChild(row(v, p, 'stray', false));
      });
      t.appendChild(tb);
      c.appendChild(t);
      if (o.waiting.length > WAITERS_SHOWN) {
        const more = el(
          'button',
          'more',
          expanded.has(v.name) ? `show the first ${WAITERS_SHOWN} only` : `show all ${o.waiting.length} waiting`,
        );
        more.addEventListener('click', () => {
          if (expanded.has(v.name)) expanded.delete(v.name);
          else expanded.add(v.name);
          schedule();
        });
        c.appendChild(more);
      }
    }
    if (v.kind === 'lock' || v.kind === 'election' || v.kind === 'lock-or-election') c.appendChild(bar(e));
    return c;
  }
  function timeline() {
    const ol = el('ol');
    ol.id = 'timeline';
    // Elections nobody leads now, with a history here: the gap so far, on top. (A free lock is the
    // normal state: its card says so, the timeline does not.)
    S.entities.forEach((e) => {
      const v = e.view;
      if (v.kind !== 'election' || v.holders.length > 0 || v.vacantSince === null || v.vacantSince === undefined || !byName.has(v.name))
        return;
      const li = el('li', 'gap');
      li.dataset.name = v.name;
      li.appendChild(el('span', 'when', 'now'));
      li.appendChild(el('span', 'what', v.name));
      const tx = el('span', 'text');
      function upd() {
        tx.textContent = `no ${holderWord(v.kind)} for ${dur(now() - v.vacantSince)}`;
      }
      upd();
      live.push(upd);
      li.appendChild(tx);
      ol.appendChild(li);
    });
    for (let i = S.timeline.length - 1, n = 0; i >= 0 && n < 200; i--, n++) {
      const ev = S.timeline[i],
        li = el('li', ev.type);
      li.dataset.name = ev.name;
      li.dataset.type = ev.type;
      li.dataset.token = ev.token;
      li.appendChild(el('span', 'when', clock(ev.at, S.offset)));
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
    S.timeline.forEach((ev) => {
      let l = byName.get(ev.name);
      if (!l) byName.set(ev.name, (l = []));
      l.push(ev);
    });
    const status = byId('status'),
      notice = byId('notice');
    const ok = S.sse && S.etcd;
    status.className = `status ${ok ? 'live' : S.loaded ? 'down' : 'connecting'}`;
    status.textContent = ok ? `live · revision ${S.revision}` : S.loaded ? 'disconnected, reconnecting…' : 'connecting…';
    if (!S.sse && S.loaded) {
      notice.hidden = false;
      notice.textContent = 'Disconnected from the inspector, reconnecting… (what is shown may be out of date)';
    } else if (!S.etcd && S.loaded) {
      notice.hidden = false;
      notice.textContent = `The inspector is disconnected from etcd, reconnecting…${S.error ? ` (${S.error})` : ''}`;
    } else notice.hidden = true;
    byId('prefix').textContent =
      (S.prefix === '' ? 'every key' : `prefix ${JSON.stringify(S.prefix)}`) + (S.showValues ? ' · showing values' : ' · values hidden');
    const list = document.createDocumentFragment(),
      names = Array.from(S.entities.keys()).sort();
    names.forEach((n) => {
      list.appendChild(card(S.entities.get(n)));
    });
    const section = byId('entities');
    section.replaceChildren(list);
    if (names.length === 0)
      section.appendChild(
        el(
          'div',
          'empty',
          S.loaded
            ? 'Nothing under this prefix yet: locks, semaphores, readers-writer locks and elections appear here as their keys do.'
            : 'Loading…',
        ),
      );
    byId('timeline').replaceWith(timeline());
    hook.revision = S.revision;
    hook.renderedAt = Date.now();
    hook.renders++;
    hook.entities = names.length;
  }
  setInterval(() => {
    for (let i = 0; i < live.length; i++) live[i]();
  }, 250);
  connect();
  render();
})();
