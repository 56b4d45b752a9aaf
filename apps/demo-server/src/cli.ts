import { run } from './main.js';

// `npm run x -- --flag` style launchers may leave the separator in place: a leading `--` is not an argument.
const argv = process.argv.slice(2);
if (argv[0] === '--') argv.shift();

run(argv).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`mrtr-demo: fatal: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
