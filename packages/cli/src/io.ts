import { parseArgs, type ParseArgsConfig } from 'node:util';

/** Exit codes (documented in the README and in `mrtr --help`). */
export const EXIT_OK = 0;
/** The thing checked is bad: an invalid key ring, a refused or unreadable token, a failed doctor check. */
export const EXIT_BAD = 1;
/** Usage error: unknown command or option, a missing or malformed argument. */
export const EXIT_USAGE = 2;

/** A usage error: printed with a hint to `--help`, exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** What a command needs from the outside world (injected so every path is testable). */
export interface Io {
  argv: string[];
  env: NodeJS.ProcessEnv;
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  readStdin(): Promise<string>;
}

/** Colour only on a TTY, never with NO_COLOR (any value); FORCE_COLOR (non-empty, not "0") forces it on. */
export function colourEnabled(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '' && env.FORCE_COLOR !== '0') return true;
  return stream.isTTY === true;
}

export interface Style {
  ok(text: string): string;
  warn(text: string): string;
  fail(text: string): string;
  dim(text: string): string;
  bold(text: string): string;
}

export function style(enabled: boolean): Style {
  const wrap = (open: number, close: number) => (text: string) => (enabled ? `\u001b[${open}m${text}\u001b[${close}m` : text);
  return { ok: wrap(32, 39), warn: wrap(33, 39), fail: wrap(31, 39), dim: wrap(2, 22), bold: wrap(1, 22) };
}

// C0 and C1 controls, DEL, the line and paragraph separators, and the bidi controls (marks, the Arabic letter
// mark, embeddings, overrides, isolates): what can move the cursor, erase a line or reorder what a terminal shows.
const UNSAFE_TEXT = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// The same but the C0 controls, for JSON text: JSON.stringify escapes those inside strings, and the newlines
// outside strings are its layout.
const UNSAFE_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const hex = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * Text that came from outside (a token, a header, a store's reply or error, the environment, an option) made
 * safe to print: every control and bidi character, a newline too, becomes a visible `\uXXXX`. One pass, linear.
 */
export function escapeText(text: string): string {
  return text.replace(UNSAFE_TEXT, hex);
}

/** A piece of a line of terminal output: plain text, or text in one of the {@link Style}'s tones. */
export type Piece = string | { tone: keyof Style; text: string };

/** Text in a tone of the {@link Style}, for {@link render}. */
export const toned = (tone: keyof Style, text: string): Piece => ({ tone, text });

/**
 * The one way a line reaches the terminal: every piece is escaped ({@link escapeText}), then coloured, so the only
 * escape sequences written are the Style's own colours, never one that came with the text.
 */
export function render(s: Style, ...pieces: Piece[]): string {
  return pieces.map((p) => (typeof p === 'string' ? escapeText(p) : s[p.tone](escapeText(p.text)))).join('');
}

export type Status = 'ok' | 'warn' | 'fail' | 'info';

/** One `ok`/`warn`/`fail` line, the status padded to a column; the name and detail are escaped ({@link render}). */
export function statusLine(s: Style, status: Status, name: string, detail: string): string {
  const tone = status === 'info' ? 'dim' : status;
  return render(s, toned(tone, status.padEnd(4)), '  ', escapeText(name).padEnd(14), ' ', detail);
}

/**
 * Writes lines of terminal output, each made by {@link render} or {@link statusLine} (or a literal): the one sink of
 * the commands' text output, so that every line that can quote a file, the environment or a server is escaped.
 */
export function writeLines(stream: NodeJS.WritableStream, lines: readonly string[]): void {
  stream.write(`${lines.join('\n')}\n`);
}

/** A command line parsed: the options' values by name, and the positionals. */
export interface ParsedArgs {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

/** `util.parseArgs` with usage errors as `UsageError` (exit 2) instead of a thrown TypeError. */
export function parse<T extends NonNullable<ParseArgsConfig['options']>>(
  args: string[],
  options: T,
  allowPositionals: boolean,
): ParsedArgs {
  try {
    const { values, positionals } = parseArgs({ args, options, allowPositionals, strict: true });
    return { values: values as Record<string, string | boolean | undefined>, positionals };
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message.replace(/\. To specify .*$/s, '.') : String(error));
  }
}

/** Options every command takes. */
export const COMMON_OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' },
} as const;

/** A command's own options, besides {@link COMMON_OPTIONS}: those that take a value, and the flags. */
export interface CommandOptions {
  strings?: readonly string[];
  flags?: readonly string[];
}

/**
 * The head of every command: parses its options ({@link COMMON_OPTIONS} and its own, positionals allowed) and, on
 * `--help`, prints its help and gives `undefined`, for the command to return {@link EXIT_OK}.
 */
export function parseCommand(io: Io, args: string[], help: string, own: CommandOptions): ParsedArgs | undefined {
  const options: NonNullable<ParseArgsConfig['options']> = { ...COMMON_OPTIONS };
  for (const name of own.strings ?? []) options[name] = { type: 'string' };
  for (const name of own.flags ?? []) options[name] = { type: 'boolean' };
  const parsed = parse(args, options, true);
  if (!parsed.values.help) return parsed;
  io.stdout.write(help);
  return undefined;
}

/** A positive integer option in [min, max]. */
export function intValue(name: string, value: string | boolean | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !/^\d+$/.test(value)) throw new UsageError(`--${name} must be an integer`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`--${name} must be between ${min} and ${max}`);
  return n;
}

/** Reads all of stdin as text (bounded: 1 MiB). */
export function readStream(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buffer.length;
      if (size > 1024 * 1024) {
        reject(new UsageError('stdin is larger than 1 MiB'));
        return;
      }
      chunks.push(buffer);
    });
    stream.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    stream.on('error', reject);
  });
}

/**
 * Writes a JSON document (one line per value, 2-space indent) to stdout. C1 controls, DEL, U+2028/2029 and the bidi
 * controls, which JSON.stringify leaves raw, are written as `\uXXXX` escapes too: the same JSON value.
 */
export function writeJson(io: Io, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value, null, 2).replace(UNSAFE_JSON, hex)}\n`);
}

/** A string option's value (`undefined` when absent). */
export const str = (value: string | boolean | undefined): string | undefined => (typeof value === 'string' ? value : undefined);
