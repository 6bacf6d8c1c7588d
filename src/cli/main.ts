#!/usr/bin/env node
// The `etcd-concurrency` command: finds the command word, runs it, and exits with its code.
import { readFileSync } from 'node:fs';
import { nearest } from '../spelling.js';
import { devCommand, DEV_HELP } from './dev.js';
import { doctorCommand, DOCTOR_HELP } from './doctor.js';
import { electCommand, ELECT_HELP } from './elect.js';
import { etcdCommand, ETCD_HELP } from './etcd.js';
import { inspectCommand, INSPECT_HELP } from './inspect.js';
import { lockCommand, LOCK_HELP } from './lock.js';
import { COMMON_HELP, COMMON_WITH_VALUE } from './options.js';
import { EXIT, print, report, setDebug, UsageError } from './output.js';

const COMMANDS: Record<string, { run: (args: string[]) => Promise<number>; help: string }> = {
  lock: { run: lockCommand, help: LOCK_HELP },
  elect: { run: electCommand, help: ELECT_HELP },
  inspect: { run: inspectCommand, help: INSPECT_HELP },
  dev: { run: devCommand, help: DEV_HELP },
  doctor: { run: doctorCommand, help: DOCTOR_HELP },
  etcd: { run: etcdCommand, help: ETCD_HELP },
};

const HELP = `Usage: etcd-concurrency <command> [options]

Distributed locks and leader election on etcd v3, compatible with \`etcdctl lock\` and
\`etcdctl elect\` on the same names.

Commands:
  lock <name> [-- cmd...]   hold a lock while a command runs (or until Ctrl-C)
  elect <name> <proposal>   campaign and lead until Ctrl-C; elect --listen <name> to observe
  inspect <name>            show the owner and the waiting queue (--json, --watch)
  inspect --web [prefix]    a live page of every lock, queue and leader under prefix
  dev                       run a throwaway local etcd until Ctrl-C
  etcd install <3.4..3.7>   get an etcd (Debian's package, or a build from Go modules); etcd list
  doctor                    check that the cluster and this user are ready for locks
  help <command>            show a command's help

${COMMON_HELP}
  --version               print the version

Exit status: 0 ok, 1 error, 2 bad usage, 3 lock or leadership lost, 4 lock not acquired (--try, --timeout),
5/6 doctor: ready with warnings / not ready, 130/143 interrupted while waiting; \`lock -- cmd\` exits
with the command's status.
See \`etcd-concurrency <command> --help\`.`;

async function main(argv: string[]): Promise<number> {
  // Options may come before the command word (as with etcdctl): skip them, and their values.
  let i = 0;
  while (i < argv.length && argv[i]!.startsWith('-') && argv[i] !== '--') {
    const arg = argv[i]!;
    if (arg === '--version') {
      print(version());
      return EXIT.ok;
    }
    if (arg === '--help' || arg === '-h') {
      print(HELP);
      return EXIT.ok;
    }
    i += COMMON_WITH_VALUE.has(arg) ? 2 : 1;
  }
  const word = argv[i];
  if (word === undefined) {
    process.stderr.write(`${HELP}\n`);
    return EXIT.usage;
  }
  if (word === 'help') {
    const topic = argv[i + 1];
    if (topic === undefined) print(HELP);
    else if (COMMANDS[topic]) print(COMMANDS[topic].help);
    else throw unknownCommand(topic);
    return EXIT.ok;
  }
  const command = Object.hasOwn(COMMANDS, word) ? COMMANDS[word] : undefined;
  if (!command) throw unknownCommand(word);
  return command.run([...argv.slice(0, i), ...argv.slice(i + 1)]);
}

/** "unknown command", with the command most likely meant, else the list of commands. */
function unknownCommand(word: string): UsageError {
  const near = nearest(word, Object.keys(COMMANDS));
  return new UsageError(`unknown command "${word}"; ${near ? `did you mean ${near}?` : `commands: ${Object.keys(COMMANDS).join(', ')}`}`);
}

function version(): string {
  // dist/cli/main.js and src/cli/main.ts both sit two levels below package.json.
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

const argv = process.argv.slice(2);
// Set before parsing, so that even a parse error shows its stack.
setDebug(argv.includes('--debug'));
// Deprecation warnings speak to developers, not to users of the command; --debug shows them.
process.noDeprecation = !argv.includes('--debug');
main(argv).then(
  (code) => process.exit(code),
  (err: unknown) => process.exit(report(err)),
);
