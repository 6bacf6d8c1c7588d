// `new Client()` with no endpoints reads ETCDCTL_ENDPOINTS, as etcdctl does and as `etcd-concurrency
// dev` prints it; explicit endpoints win; an empty variable counts as unset.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';

const saved = process.env.ETCDCTL_ENDPOINTS;
let etcd: EtcdCluster | undefined;
after(async () => {
  if (saved === undefined) delete process.env.ETCDCTL_ENDPOINTS;
  else process.env.ETCDCTL_ENDPOINTS = saved;
  await etcd?.stop();
});

test('no endpoints: ETCDCTL_ENDPOINTS, then 127.0.0.1:2379; explicit endpoints win', async () => {
  etcd = await startEtcd();
  process.env.ETCDCTL_ENDPOINTS = etcd.endpoints.join(',');
  const fromEnv = new Client();
  try {
    assert.deepEqual(fromEnv.endpoints, etcd.endpoints);
    assert.ok((await fromEnv.status()).version.length > 0, 'it reaches the etcd the variable names');
  } finally {
    await fromEnv.close();
  }
  const explicit = new Client({ endpoints: ['127.0.0.1:1'] });
  assert.deepEqual(explicit.endpoints, ['127.0.0.1:1']);
  await explicit.close();
  process.env.ETCDCTL_ENDPOINTS = '';
  const unset = new Client();
  assert.deepEqual(unset.endpoints, ['127.0.0.1:2379']);
  await unset.close();
});
