// The delaying proxies of the round-trip phase (bench/rtt-net.ts), in a process of their own: in
// the bench's process our clients' CPU would hold up the proxies' timers, a cost Go's process (and
// a real network) does not pay.
//
//   node --import tsx bench/rtt-proxies.ts DELAY_MS TARGET...
// Prints one JSON line, the proxies' endpoints in the order of the targets, and exits when its
// stdin closes.
import { startProxy } from '../src/testing/proxy.js';

const [delayArg, ...targets] = process.argv.slice(2);
const delay = Number(delayArg);
const proxies = await Promise.all(targets.map((t) => startProxy(t)));
for (const p of proxies) p.delay(delay);
process.stdout.write(`${JSON.stringify(proxies.map((p) => p.endpoint))}\n`);
process.stdin.resume();
process.stdin.on('end', () => void Promise.all(proxies.map((p) => p.close())).then(() => process.exit(0)));
