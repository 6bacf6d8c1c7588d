import { Client, Session } from '../src/index.js';
const client = new Client({ endpoints: '127.0.0.1:45091' });
const t = performance.now();
const out: Session[] = [];
for (let i = 0; i < 500; i += 250) {
  const r = await Promise.allSettled(Array.from({ length: 250 }, () => Session.create(client, { ttl: 60 })));
  console.log('batch', i, r.filter((x) => x.status === 'rejected').map((x: any) => x.reason.message).slice(0, 2), performance.now() - t);
  out.push(...r.filter((x) => x.status === 'fulfilled').map((x: any) => x.value));
}
await Promise.all(out.map((s) => s.close()));
console.log('closed', performance.now() - t);
await client.close();
