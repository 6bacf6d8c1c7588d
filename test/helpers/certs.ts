// Throwaway TLS certificates made with openssl.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from 'node:os';

const installed = new Map<string, boolean>();

/** Whether `openssl` runs here (asked once), for a test's `skip`. */
export function hasOpenssl(): boolean {
  if (!installed.has('openssl')) installed.set('openssl', spawnSync('openssl', ['version']).status === 0);
  return installed.get('openssl')!;
}

/** Throwaway certificates in a temporary directory (see testCerts). */
export interface TestCerts {
  dir: string;
  /** A file's path in `dir`. */
  file(name: string): string;
  /** Runs openssl in `dir`; fails the test on a non-zero exit. */
  openssl(args: string[]): void;
  /** The `tls` option of startEtcd: `node.pem` as server certificate, client certificates required. */
  etcdTls: { certFile: string; keyFile: string; trustedCaFile: string; clientCertAuth: true };
}

/**
 * A throwaway CA (`ca.pem`) and one certificate it signed (`node.pem`, `node.key`; for 127.0.0.1
 * unless `node` names another subject and subjectAltName), good as both server and client
 * certificate, in a new temporary directory; plus one more CA per name in `otherCas` (`<name>.pem`,
 * `<name>.key`) that signed nothing. Needs openssl.
 */
export async function testCerts(
  scope: string,
  otherCas: string[] = [],
  node: { subject: string; altName: string } = { subject: '/CN=127.0.0.1', altName: 'IP:127.0.0.1' },
): Promise<TestCerts> {
  const dir = await mkdtemp(path.join(tmpdir(), `${scope}-`));
  const file = (f: string): string => path.join(dir, f);
  const openssl = (args: string[]): void => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', `/CN=${scope}-ca`]);
  for (const other of otherCas)
    openssl(['req', '-x509', ...ec, '-keyout', `${other}.key`, '-out', `${other}.pem`, '-days', '1', '-subj', `/CN=${scope}-${other}-ca`]);
  openssl([
    'req',
    ...ec,
    '-keyout',
    'node.key',
    '-out',
    'node.csr',
    '-subj',
    node.subject,
    '-addext',
    `subjectAltName=${node.altName}`,
    '-addext',
    'extendedKeyUsage=serverAuth,clientAuth',
  ]);
  openssl([
    'x509',
    '-req',
    '-in',
    'node.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'node.pem',
    '-days',
    '1',
    '-copy_extensions',
    'copy',
  ]);
  return {
    dir,
    file,
    openssl,
    etcdTls: { certFile: file('node.pem'), keyFile: file('node.key'), trustedCaFile: file('ca.pem'), clientCertAuth: true },
  };
}
