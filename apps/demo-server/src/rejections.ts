import { AsyncLocalStorage } from 'node:async_hooks';

/** Entries kept per principal (the newest win). */
export const REJECTIONS_PER_PRINCIPAL = 20;
/** Principals kept at once (least recently rejected give way): bounds the log even with many tokens. */
export const REJECTION_PRINCIPALS = 1_000;

/** One rejection as the playground page sees it: the code and where, never the state, an argument or a key. */
export interface Rejection {
  /** Increases by one per recorded rejection (over all principals): the page asks for what is new. */
  seq: number;
  /** Milliseconds since the epoch. */
  at: number;
  code: string;
  method: string;
  /** Tool or prompt name; for a resource only its scheme (`runbook://…`: the rest of the URI is an argument). */
  target: string | undefined;
}

const METHODS = new Set(['tools/call', 'prompts/get', 'resources/read']);

/** What the HTTP front knows about the request being served (read by the `onReject` hook through async context). */
export const requestPrincipal = new AsyncLocalStorage<string>();

/** The adapter's recent rejection codes, per principal, bounded in entries and principals. */
export class RejectionLog {
  private readonly byPrincipal = new Map<string, Rejection[]>();
  private seq = 0;
  private readonly perPrincipal: number;
  private readonly principals: number;
  private readonly now: () => number;

  constructor(perPrincipal = REJECTIONS_PER_PRINCIPAL, principals = REJECTION_PRINCIPALS, now: () => number = Date.now) {
    this.perPrincipal = perPrincipal;
    this.principals = principals;
    this.now = now;
    if (!Number.isInteger(perPrincipal) || perPrincipal < 1) throw new RangeError('RejectionLog: perPrincipal must be a positive integer');
    if (!Number.isInteger(principals) || principals < 1) throw new RangeError('RejectionLog: principals must be a positive integer');
  }

  /** Records `event` for `principal` (nothing when the principal is unknown: never guessed). */
  record(principal: string | undefined, event: { code: string; method: string; target: string | undefined }): void {
    if (principal === undefined) return;
    let list = this.byPrincipal.get(principal);
    if (list === undefined) {
      if (this.byPrincipal.size >= this.principals) {
        const oldest = this.byPrincipal.keys().next().value;
        if (oldest !== undefined) this.byPrincipal.delete(oldest);
      }
      list = [];
    } else {
      this.byPrincipal.delete(principal); // re-inserted below: the Map's order is the recency order
    }
    this.byPrincipal.set(principal, list);
    list.push({
      seq: ++this.seq,
      at: this.now(),
      code: /^ERR_[A-Z_]{1,40}$/.test(event.code) ? event.code : 'ERR_UNKNOWN',
      method: METHODS.has(event.method) ? event.method : 'other',
      target: publicTarget(event.method, event.target),
    });
    if (list.length > this.perPrincipal) list.splice(0, list.length - this.perPrincipal);
  }

  /** The principal's recent rejections, oldest first (a copy). */
  recent(principal: string): Rejection[] {
    return (this.byPrincipal.get(principal) ?? []).map((entry) => ({ ...entry }));
  }
}

function publicTarget(method: string, target: string | undefined): string | undefined {
  if (target === undefined) return undefined;
  if (method === 'resources/read') {
    const scheme = /^([a-z][a-z0-9+.-]{0,30}):/i.exec(target)?.[1];
    return scheme === undefined ? undefined : `${scheme}://…`;
  }
  return /^[A-Za-z0-9_.-]{1,64}$/.test(target) ? target : undefined;
}
