// Self time of a V8 CPU profile by layer (our client, node:http2, protobuf, GC, ...), for bench/profile-unary.ts.
import type { Profiler } from 'node:inspector';

type Layer =
  | 'protobuf runtime (@bufbuild/protobuf)'
  | 'generated codec (src/proto)'
  | 'our client (src/client)'
  | 'our library (other src/)'
  | 'this script / bench'
  | 'node http2'
  | 'node streams'
  | 'node net / stream_base'
  | 'node event loop (timers, microtasks, nextTick, async hooks, events)'
  | 'node other'
  | 'other JS (tsx, etcd3, ...)'
  | 'V8 / native (program)'
  | 'native, no JS on the stack (libuv, nghttp2, ...)'
  | 'garbage collector'
  | 'idle';

function layerOf(url: string): Layer | undefined {
  if (!url) return undefined;
  if (url.includes('/@bufbuild/protobuf/')) return 'protobuf runtime (@bufbuild/protobuf)';
  // The library from src (tsx) or from a build (dist/, as bench/renew-cpu.ts loads it).
  if (/\/(src|dist)\/proto\//.test(url) && !url.includes('node_modules')) return 'generated codec (src/proto)';
  if (/\/(src|dist)\/client\//.test(url) && !url.includes('node_modules')) return 'our client (src/client)';
  if (/\/(src|dist)\//.test(url) && !url.includes('node_modules')) return 'our library (other src/)';
  if (url.includes('/bench/')) return 'this script / bench';
  if (/^node:(internal\/)?http2/.test(url)) return 'node http2';
  if (url.startsWith('node:internal/streams') || url === 'node:stream') return 'node streams';
  if (url === 'node:net' || url.startsWith('node:internal/stream_base') || url.startsWith('node:internal/net'))
    return 'node net / stream_base';
  if (
    /^node:(internal\/)?(timers|process\/task_queues|async_hooks|events|internal\/async_hooks)/.test(url) ||
    url.startsWith('node:internal/async_hooks') ||
    url === 'node:events'
  )
    return 'node event loop (timers, microtasks, nextTick, async hooks, events)';
  if (url.startsWith('node:')) return 'node other';
  return 'other JS (tsx, etcd3, ...)';
}

export interface ProfileBreakdown {
  /** Sampled non-idle CPU per call, µs. */
  cpuUsPerCall: number;
  /** Per layer: µs per call, and percent of the non-idle samples. */
  layers: { layer: Layer; usPerCall: number; percent: number }[];
  /** The functions with the most self time (native frames folded into their JS caller). */
  top: { fn: string; layer: Layer; usPerCall: number; percent: number }[];
  idlePercent: number;
}

/**
 * Self time by layer. A frame without a script URL (a C++ binding or a V8 builtin: the socket
 * write, Buffer copies, Map lookups) counts for the layer of the nearest JS caller, so that "node
 * http2" includes the native half of a stream write; (program) is time V8 could not attribute.
 */
export function analyze(profile: Profiler.Profile, calls: number, window?: [number, number]): ProfileBreakdown {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const layerById = new Map<number, Layer>();
  const fnById = new Map<number, string>();
  const walk = (id: number, inherited: Layer, inheritedFn: string): void => {
    const n = byId.get(id)!;
    const name = n.callFrame.functionName;
    let layer: Layer;
    let fn = inheritedFn;
    if (name === '(idle)') layer = 'idle';
    else if (name === '(program)') layer = 'V8 / native (program)';
    else if (name === '(garbage collector)') layer = 'garbage collector';
    else if (name === '(root)') layer = 'native, no JS on the stack (libuv, nghttp2, ...)';
    else {
      const l = layerOf(n.callFrame.url);
      layer = l ?? inherited;
      // tsx emits each module on one line: the column tells functions apart there.
      if (l)
        fn = `${name || '(anonymous)'} ${n.callFrame.url.replace(/^.*?\/(node_modules|src|bench)\//, '$1/')}:${n.callFrame.lineNumber + 1}:${n.callFrame.columnNumber + 1}`;
      else if (name) fn = `${inheritedFn} > ${name}`;
    }
    if (name.startsWith('(')) fn = name;
    layerById.set(id, layer);
    fnById.set(id, fn);
    for (const c of n.children ?? []) walk(c, layer, fn);
  };
  walk(profile.nodes[0]!.id, 'other JS (tsx, etcd3, ...)', '(root)');
  // Sample intervals: timeDeltas[i] is the time before sample i.
  const selfUs = new Map<number, number>();
  const deltas = profile.timeDeltas ?? [];
  const samples = profile.samples ?? [];
  let at = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    at += deltas[i] ?? 0;
    // Only the samples inside the window (monotonic µs, as process.hrtime), when one is given.
    if (window && (at < window[0] || at > window[1])) continue;
    const dt = deltas[i + 1] ?? 0; // the time until the next sample is spent in this one
    selfUs.set(samples[i]!, (selfUs.get(samples[i]!) ?? 0) + dt);
  }
  const layerUs = new Map<Layer, number>();
  const fnUs = new Map<string, { layer: Layer; us: number }>();
  for (const [id, us] of selfUs) {
    const layer = layerById.get(id)!;
    layerUs.set(layer, (layerUs.get(layer) ?? 0) + us);
    if (layer === 'idle') continue;
    const fn = fnById.get(id)!;
    const e = fnUs.get(fn) ?? { layer, us: 0 };
    e.us += us;
    fnUs.set(fn, e);
  }
  const idle = layerUs.get('idle') ?? 0;
  const busy = [...layerUs].filter(([l]) => l !== 'idle').reduce((a, [, us]) => a + us, 0);
  const total = busy + idle;
  return {
    cpuUsPerCall: busy / calls,
    idlePercent: total > 0 ? (100 * idle) / total : 0,
    layers: [...layerUs]
      .filter(([l]) => l !== 'idle')
      .sort((a, b) => b[1] - a[1])
      .map(([layer, us]) => ({ layer, usPerCall: us / calls, percent: (100 * us) / busy })),
    top: [...fnUs]
      .sort((a, b) => b[1].us - a[1].us)
      .slice(0, Number(process.env.PROFILE_TOP ?? 15))
      .map(([fn, e]) => ({ fn, layer: e.layer, usPerCall: e.us / calls, percent: (100 * e.us) / busy })),
  };
}

export function printBreakdown(title: string, b: ProfileBreakdown): void {
  const lines = [`${title}: ${b.cpuUsPerCall.toFixed(0)} µs of sampled CPU per call (idle ${b.idlePercent.toFixed(0)} % of the profile)`];
  for (const l of b.layers) lines.push(`  ${l.percent.toFixed(1).padStart(5)} %  ${l.usPerCall.toFixed(1).padStart(7)} µs  ${l.layer}`);
  lines.push('  top self time:');
  for (const t of b.top.slice(0, 10))
    lines.push(`  ${t.percent.toFixed(1).padStart(5)} %  ${t.usPerCall.toFixed(1).padStart(7)} µs  ${t.fn}`);
  process.stdout.write(`${lines.join('\n')}\n\n`);
}
