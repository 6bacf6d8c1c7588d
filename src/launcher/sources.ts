// The Debian archive this machine already uses, read from its apt sources, so that no mirror's
// host name is written into the package: the installer fetches Debian's etcd packages from it.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** One `deb` source: where, which suites, which components. */
export interface AptSource {
  uri: string;
  suites: string[];
  components: string[];
}

/** Debian's codenames and suite names: a source listing one of them is a Debian archive. */
const DEBIAN_SUITES = /^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)$/;

/** The one-line format: `deb [options] uri suite [component...]`. */
function parseList(text: string): AptSource[] {
  const out: AptSource[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)((?:\s+\S+)*)$/.exec(line);
    if (m) out.push({ uri: m[1]!, suites: [m[2]!], components: m[3]!.trim().split(/\s+/).filter(Boolean) });
  }
  return out;
}

/** The deb822 format (`*.sources`): stanzas of `Field: value` separated by blank lines. */
function parseSources(text: string): AptSource[] {
  const out: AptSource[] = [];
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    let last: string | undefined;
    for (const raw of stanza.split('\n')) {
      if (raw.startsWith('#')) continue;
      if (/^\s/.test(raw) && last) fields.set(last, `${fields.get(last)} ${raw.trim()}`);
      const m = /^([A-Za-z-]+):\s*(.*)$/.exec(raw);
      if (m) fields.set((last = m[1]!.toLowerCase()), m[2]!.trim());
    }
    if (!(fields.get('types') ?? '').split(/\s+/).includes('deb') || /^(no|false)$/i.test(fields.get('enabled') ?? '')) continue;
    const words = (k: string): string[] => (fields.get(k) ?? '').split(/\s+/).filter(Boolean);
    for (const uri of words('uris')) out.push({ uri, suites: words('suites'), components: words('components') });
  }
  return out;
}

/** Every `deb` source of the apt configuration under `etc` (/etc/apt by default). */
export function aptSources(etc = '/etc/apt'): AptSource[] {
  const read = (p: string): string => {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      return '';
    }
  };
  const out = parseList(read(join(etc, 'sources.list')));
  let names: string[] = [];
  try {
    names = readdirSync(join(etc, 'sources.list.d')).sort();
  } catch {
    // no sources.list.d
  }
  for (const n of names) {
    if (n.endsWith('.list')) out.push(...parseList(read(join(etc, 'sources.list.d', n))));
    else if (n.endsWith('.sources')) out.push(...parseSources(read(join(etc, 'sources.list.d', n))));
  }
  return out;
}

/** ETCD_DEBIAN_MIRROR is not one http(s) URL; the message says what it must be. */
export class DebianMirrorError extends Error {
  static readonly code = 'ERR_ETCD_DEBIAN_MIRROR';
  readonly code = DebianMirrorError.code;
  override readonly name = 'DebianMirrorError';
}

/**
 * ETCD_DEBIAN_MIRROR as one http:// or https:// URL and nothing else: it is written into an apt
 * source line, where white space or a line break would add options or a second (trusted) source.
 */
function mirrorFromEnv(raw: string): string {
  let url: URL | undefined;
  try {
    // Printable ASCII, no white space; no query or fragment (nothing a mirror needs).
    url = /^[!-~]+$/.test(raw) && !/[?#]/.test(raw) ? new URL(raw) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new DebianMirrorError(
      `ETCD_DEBIAN_MIRROR must be one http:// or https:// URL (the Debian archive, e.g. ending in /debian), got ${JSON.stringify(raw)}`,
    );
  }
  if (url.username !== '' || url.password !== '') {
    throw new DebianMirrorError(
      'ETCD_DEBIAN_MIRROR must not hold a user name or password (it is printed in the progress lines); apt reads them from /etc/apt/auth.conf',
    );
  }
  return raw.replace(/\/+$/, '');
}

/**
 * The Debian archive to fetch packages from: ETCD_DEBIAN_MIRROR, else the first apt source with a
 * Debian suite (not -security/-updates/-backports) and the main component; undefined if none
 * (e.g. on Ubuntu, whose archives hold Ubuntu's suites).
 * @throws {@link DebianMirrorError} when ETCD_DEBIAN_MIRROR is set but is not one http(s) URL.
 */
export function debianMirror(etc = '/etc/apt'): string | undefined {
  const fromEnv = process.env.ETCD_DEBIAN_MIRROR?.trim();
  if (fromEnv) return mirrorFromEnv(fromEnv);
  const hit = aptSources(etc).find(
    (s) => !s.uri.startsWith('cdrom:') && s.components.includes('main') && s.suites.some((suite) => DEBIAN_SUITES.test(suite)),
  );
  return hit?.uri.replace(/\/+$/, '');
}
