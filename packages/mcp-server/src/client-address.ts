/**
 * The client address of an HTTP request, by which anonymous callers are bounded per address (2025-era sessions,
 * tasks): what `createHttpHandler` resolved for the request (see `HttpHandlerOptions.trustProxy`), handed to the
 * tasks runtime with the request object itself, so nothing a client sends can set it.
 */
import type { ServerContext } from '@modelcontextprotocol/server';

/** Longest `X-Forwarded-For` read; a longer one is not read at all (the peer's address counts instead). */
const MAX_FORWARDED_CHARS = 2_048;
/** Longest address taken from `X-Forwarded-For` (an IPv6 address with a zone is well under it). */
const MAX_ADDRESS_CHARS = 64;
/** The address of a request whose peer is not known: every such request is one address. */
export const UNKNOWN_ADDRESS = '';

const resolved = new WeakMap<Request, string>();

/** Records the address `createHttpHandler` resolved for `request`, for the tasks its calls start. */
export function recordClientAddress(request: Request, address: string): void {
  resolved.set(request, address);
}

/**
 * The client address of the request behind `ctx`: `undefined` without an HTTP request (stdio: the connection is
 * the one client), {@link UNKNOWN_ADDRESS} for one `createHttpHandler` did not serve (all of them one address).
 */
export function clientAddressOf(ctx: ServerContext): string | undefined {
  const request = ctx.http?.req;
  return request === undefined ? undefined : (resolved.get(request) ?? UNKNOWN_ADDRESS);
}

/**
 * The bucket an address counts in: an IPv4 address as it is (an IPv4-mapped IPv6 one as IPv4), an IPv6 address by
 * its /64 prefix (one subscriber's allocation: a caller holding a /64 must not get 2^64 buckets), anything else as
 * it is, lower-cased. Linear in the address's length.
 */
export function addressKey(address: string): string {
  let a = address.trim().toLowerCase();
  if (a.startsWith('[') && a.endsWith(']')) a = a.slice(1, -1);
  const zone = a.indexOf('%');
  if (zone >= 0) a = a.slice(0, zone);
  if (!a.includes(':')) return a;
  const mapped = /^(?:0{0,4}:){0,4}(?:0{0,4})?:ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(a);
  if (mapped !== null) return mapped[1]!;
  const halves = a.split('::');
  if (halves.length > 2) return a;
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const tail = halves.length === 2 && halves[1] !== '' ? halves[1]!.split(':') : [];
  const groups = halves.length === 2 ? [...head, ...Array<string>(Math.max(0, 8 - head.length - tail.length)).fill('0'), ...tail] : head;
  const prefix = groups.slice(0, 4);
  if (prefix.length < 4 || prefix.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return a;
  return `${prefix.map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}

/**
 * The address a request counts under: the peer that opened the connection (`remoteAddress`), or, behind
 * `trustProxy` proxies that each append the address they received from to `X-Forwarded-For`, the entry that many
 * hops from the right (the one the outermost trusted proxy received from; the leftmost when there are fewer
 * entries). With `trustProxy` 0 the header is never read, so a client cannot choose its address by sending one. A
 * header over 2,048 characters, or an entry that is empty or over 64, is not used: the peer's address counts
 * (the proxy's: one bucket for every such request). Without a peer address, {@link UNKNOWN_ADDRESS}.
 */
export function resolveClientAddress(request: Request, remoteAddress: string | undefined, trustProxy: number): string {
  const peer = typeof remoteAddress === 'string' && remoteAddress.length > 0 ? addressKey(remoteAddress) : UNKNOWN_ADDRESS;
  if (trustProxy === 0 || peer === UNKNOWN_ADDRESS) return peer;
  const forwarded = request.headers.get('x-forwarded-for');
  if (forwarded === null || forwarded.length > MAX_FORWARDED_CHARS) return peer;
  // The entry `trustProxy` commas from the right: one pass from the end of the header.
  let end = forwarded.length;
  let start = forwarded.lastIndexOf(',', end - 1) + 1;
  for (let hop = 1; hop < trustProxy && start > 0; hop++) {
    end = start - 1;
    start = forwarded.lastIndexOf(',', end - 1) + 1;
  }
  const entry = forwarded.slice(start, end).trim();
  return entry.length === 0 || entry.length > MAX_ADDRESS_CHARS ? peer : addressKey(entry);
}
