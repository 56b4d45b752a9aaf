#!/usr/bin/env node
import { createRequire } from 'node:module';
import { doctor, DOCTOR_HELP } from './doctor/index.js';
import { INSPECT_HELP, inspect } from './inspect.js';
import { EXIT_BAD, EXIT_OK, EXIT_USAGE, escapeText, type Io, readStream, UsageError } from './io.js';
import { KEYGEN_HELP, KEYS_CHECK_HELP, KEYS_HELP, KEYS_ROTATE_HELP, keygen, keysCheck, keysRotate } from './keys-commands.js';

const HELP = `Usage: mrtr <command> [options]

Tools for MCP Multi Round-Trip Request state (requestState) sealed by @mrtr/core.

Commands:
  keygen         print a new MRTR_KEYS entry ("kid:<secret>"); --env for "MRTR_KEYS=…", --jwks for a key file
  keys check     validate a key set (MRTR_KEYS, stdin or --file; MRTR_KEYS format or JWK Set) and its schedule
  keys rotate    --file: write a rotation schedule into a key file; else print the rollout steps
  inspect        tell what a token is and, with MRTR_KEYS, whether the guard accepts it and why not
  doctor         check keys, codecs, the replay store, Redis eviction, the SQL schema and clock skew

Every command takes --help and --json. Colour only on a terminal, never with NO_COLOR.
Exit codes: 0 ok, 1 the thing checked is bad, 2 usage error.

Options:
  -h, --help     this help
  -v, --version  the version of @mrtr/cli
`;

function version(): string {
  return (createRequire(import.meta.url)('../package.json') as { version: string }).version;
}

/** Runs one command line; resolves the exit code. */
export async function run(io: Io): Promise<number> {
  const [command, ...rest] = io.argv;
  const now = () => Date.now();
  switch (command) {
    case undefined:
    case '-h':
    case '--help':
    case 'help': {
      const topic = rest.join(' ');
      const help: Record<string, string> = {
        '': HELP,
        keygen: KEYGEN_HELP,
        keys: KEYS_HELP,
        'keys check': KEYS_CHECK_HELP,
        'keys rotate': KEYS_ROTATE_HELP,
        inspect: INSPECT_HELP,
        doctor: DOCTOR_HELP,
      };
      const text = help[command === 'help' ? topic : ''];
      if (text === undefined) throw new UsageError(`no help for "${topic}"`);
      if (command === undefined) {
        io.stderr.write(HELP);
        return EXIT_USAGE;
      }
      io.stdout.write(text);
      return EXIT_OK;
    }
    case '-v':
    case '--version':
      io.stdout.write(`${version()}\n`);
      return EXIT_OK;
    case 'keygen':
      return keygen(io, rest, now);
    case 'keys': {
      const [sub, ...args] = rest;
      if (sub === 'check') return keysCheck(io, args, now);
      if (sub === 'rotate') return keysRotate(io, args, now);
      if (sub === undefined || sub === '-h' || sub === '--help') {
        (sub === undefined ? io.stderr : io.stdout).write(KEYS_HELP);
        return sub === undefined ? EXIT_USAGE : EXIT_OK;
      }
      throw new UsageError(`unknown command "keys ${sub}" (check or rotate)`);
    }
    case 'inspect':
      return inspect(io, rest, now);
    case 'doctor':
      return doctor(io, rest);
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

const io: Io = {
  argv: process.argv.slice(2),
  env: process.env,
  stdout: process.stdout,
  stderr: process.stderr,
  readStdin: () => readStream(process.stdin),
};

run(io).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    // Messages quote arguments, options and the environment (MRTR_STORE, MRTR_KEYS' parse errors): escaped here.
    if (error instanceof UsageError) {
      process.stderr.write(`mrtr: ${escapeText(error.message)}\nRun "mrtr --help" or "mrtr <command> --help".\n`);
      process.exitCode = EXIT_USAGE;
      return;
    }
    process.stderr.write(`mrtr: unexpected error: ${escapeText(error instanceof Error ? error.message : String(error))}\n`);
    process.exitCode = EXIT_BAD;
  },
);
