// `etcd-concurrency etcd <install|list|path|add|exec>`: the installer, for package users with no
// repository (src/launcher/installer.ts; the repository runs the same code as `npm run etcd`).
import { setInstallerName } from '../launcher/install.js';
import { installerHelp, installerMain } from '../launcher/installer.js';
import { EXIT, print } from './output.js';

setInstallerName('etcd-concurrency etcd', 'etcd-concurrency');

export const ETCD_HELP = installerHelp();

export async function etcdCommand(args: string[]): Promise<number> {
  const code = installerMain(args, print);
  // exec: the process exits with its command; until then, wait.
  if (code === undefined) return new Promise<number>(() => {});
  return code === 2 ? EXIT.usage : code;
}
