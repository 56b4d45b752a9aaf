import type {
  CallToolResult,
  CreateMessageRequestParams,
  CreateMessageResult,
  InputRequiredResult,
  Root,
} from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import type { InputRequest } from '@mrtr/core/adapter';
import { base64urlEncode, canonicalJson, utf8Encode } from '@mrtr/core/encoding';
import { isObject } from '@mrtr/core/options';
import { sha256 } from '@noble/hashes/sha2.js';
import { type InputRequestKind, requiredKind } from '../protocol/capabilities.js';
import { type AnswerLimits, explainFormAnswer, type FormContent, type FormSchema } from './answers.js';
import type { PresuppliedPolicy } from './options.js';
import { type TaskStartOptions, type TaskWork, taskMarker } from './handoff.js';
import {
  answerCheckFor,
  type ElicitAnswer,
  type ElicitFormQuestion,
  type ElicitUrlQuestion,
  formRequest,
  ROOTS_REQUEST,
  samplingRequest,
  type UrlAnswer,
  urlRequest,
} from './questions.js';
import type { AskOptions, QuestionOptions, ToolNeed } from './types.js';

/** The `data` sealed in every state: answers pinned to their question, pending pins, kept handler data. */
export interface FlowData {
  /** Answers: key → [question pin, normalised answer]. */
  a: Record<string, [string, JsonValue]>;
  /** Questions asked in the round that minted this state: key → pin. */
  p: Record<string, string>;
  /** Handler data passed to `keep`. */
  k?: JsonValue;
}

/** Parses the sealed `data`; `undefined` if it is not ours (the caller rejects the state). */
export function parseFlowData(data: unknown): FlowData | undefined {
  if (!isObject(data) || !isObject(data.a) || !isObject(data.p)) return undefined;
  const a: FlowData['a'] = {};
  for (const [key, entry] of Object.entries(data.a)) {
    if (!Array.isArray(entry) || entry.length !== 2 || typeof entry[0] !== 'string') return undefined;
    a[key] = [entry[0], entry[1] as JsonValue];
  }
  const p: FlowData['p'] = {};
  for (const [key, pin] of Object.entries(data.p)) {
    if (typeof pin !== 'string') return undefined;
    p[key] = pin;
  }
  const out: FlowData = { a, p };
  if (Object.hasOwn(data, 'k')) out.k = data.k as JsonValue;
  return out;
}

type Sha256Utf8 = (text: string) => Uint8Array;
interface NodeCryptoLike {
  createHash(algorithm: 'sha256'): { update(text: string, encoding: 'utf8'): { digest(): Uint8Array } };
}

/** SHA-256 of the UTF-8 bytes of `text` (lone surrogates as U+FFFD), portable: `@noble/hashes`. */
export const portableSha256Utf8: Sha256Utf8 = (text) => sha256(utf8Encode(text));

/**
 * The same digest through the runtime's native `node:crypto` where there is one (Node, Bun, Deno, workerd with
 * nodejs_compat), reached without a static import so the package still loads where there is none.
 */
export function nativeSha256Utf8(): Sha256Utf8 | undefined {
  const process = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  let crypto: NodeCryptoLike | undefined;
  try {
    crypto = process?.getBuiltinModule?.('node:crypto') as NodeCryptoLike | undefined;
  } catch {
    return undefined;
  }
  if (typeof crypto?.createHash !== 'function') return undefined;
  return (text) => crypto.createHash('sha256').update(text, 'utf8').digest();
}

const sha256Utf8: Sha256Utf8 = nativeSha256Utf8() ?? portableSha256Utf8;

/**
 * 128-bit digest of the canonical JSON of an embedded request: what an answer is pinned to. Pins are sealed in
 * states that other instances open, so the value never depends on which digest implementation computed it.
 */
export function questionPin(request: InputRequest, digest: Sha256Utf8 = sha256Utf8): string {
  return base64urlEncode(digest(canonicalJson(request)).subarray(0, 16));
}

export interface Question {
  request: InputRequest;
  pin: string;
  kind: InputRequestKind;
  /** Why this round's answer to it was refused, for the person answering (form elicitations). */
  reason?: string;
}

/**
 * The embedded request to send for a question: as asked, or, when the last answer was refused, with the
 * reason in front of its message (the pin stays the question's own, so the next answer still counts).
 */
export function requestToSend(question: Question): InputRequest {
  if (question.reason === undefined || question.request.method !== 'elicitation/create') return question.request;
  const params = question.request.params as { message: string };
  return { ...question.request, params: { ...params, message: `${question.reason} ${params.message}` } } as InputRequest;
}

const KEY_PATTERN = /^[\x21-\x7e]{1,128}$/;
const ASK = Symbol('mrtr.ask');

/** The marker `need.ask()` returns; the wrapper replaces it with the real result. */
export interface AskMarker extends InputRequiredResult {
  [ASK]: AskOptions;
}

export function isAskMarker(value: unknown): value is AskMarker {
  return isObject(value) && Object.hasOwn(value, ASK);
}
export function askOptionsOf(marker: AskMarker): AskOptions {
  return marker[ASK];
}

export interface NeedInit {
  round: number;
  /** The admission's fence (0 but for a reclaimed round). */
  fence?: number | undefined;
  maxRounds: number;
  prior: FlowData | undefined;
  responses: Record<string, unknown>;
  /** The kinds this request may be asked (from its envelope, or its 2025-era session's `initialize`). */
  allowed: ReadonlySet<InputRequestKind>;
  /** Default for answers to questions not sent yet. */
  presupplied: PresuppliedPolicy;
  /** Longest string in an answer. */
  maxAnswerChars: number;
}

/** An answer seen in `inputResponses` this round: counted or ignored, and why (never the answer itself). */
export interface AnswerSeen {
  key: string;
  kind: InputRequestKind;
  accepted: boolean;
  reason: 'answered' | 'presupplied' | 'not_asked' | 'other_question' | 'invalid';
}

const PRESUPPLIED = new Set<unknown>([undefined, 'ignore', 'accept']);

/** One handler invocation's view of the flow. */
export class NeedState implements ToolNeed {
  readonly round: number;
  readonly fence: number;
  readonly maxRounds: number;
  readonly kept: JsonValue | undefined;
  readonly #stored: ReadonlyMap<string, [string, JsonValue]>;
  readonly #pendingPins: ReadonlyMap<string, string>;
  readonly #responses: Record<string, unknown>;
  readonly #allowed: ReadonlySet<InputRequestKind>;
  readonly #presupplied: PresuppliedPolicy;
  readonly #limits: AnswerLimits;
  /** Every question passed this round (for `again` and the same-key check). */
  readonly #asked = new Map<string, Question>();
  /** Questions to send. */
  readonly questions = new Map<string, Question>();
  /** Answers to carry into the next state. */
  readonly answers: Map<string, [string, JsonValue]>;
  /** Answers present in `inputResponses` and what became of them (for events), by key; last verdict wins. */
  readonly seen = new Map<string, AnswerSeen>();
  #keep: { value: JsonValue } | undefined;

  constructor(init: NeedInit) {
    this.round = init.round;
    this.fence = init.fence ?? 0;
    this.maxRounds = init.maxRounds;
    this.#stored = new Map(Object.entries(init.prior?.a ?? {}));
    this.#pendingPins = new Map(Object.entries(init.prior?.p ?? {}));
    this.answers = new Map(this.#stored);
    this.#responses = init.responses;
    this.#allowed = init.allowed;
    this.#presupplied = init.presupplied;
    this.#limits = { maxChars: init.maxAnswerChars };
    this.kept = init.prior?.k;
    if (init.prior !== undefined && Object.hasOwn(init.prior, 'k')) this.#keep = { value: init.prior.k as JsonValue };
  }

  get pending(): readonly string[] {
    return [...this.questions.keys()];
  }

  /** The data to keep for the next round, if any. */
  get keptForNext(): { value: JsonValue } | undefined {
    return this.#keep;
  }

  can(kind: InputRequestKind): boolean {
    return this.#allowed.has(kind);
  }

  elicit<const S extends FormSchema>(
    key: string,
    question: ElicitFormQuestion<S>,
    options?: QuestionOptions,
  ): ElicitAnswer<FormContent<S>> | undefined {
    const request = formRequest('need.elicit', question);
    const schema = question.requestedSchema;
    return this.#resolve(key, request, options, (answer, limits) => explainFormAnswer(schema, answer, limits)) as
      | ElicitAnswer<FormContent<S>>
      | undefined;
  }

  elicitUrl(key: string, question: ElicitUrlQuestion, options?: QuestionOptions): UrlAnswer | undefined {
    return this.#resolve(key, urlRequest('need.elicitUrl', question), options) as UrlAnswer | undefined;
  }

  sample(key: string, params: CreateMessageRequestParams, options?: QuestionOptions): CreateMessageResult | undefined {
    return this.#resolve(key, samplingRequest('need.sample', params), options) as CreateMessageResult | undefined;
  }

  roots(key: string, options?: QuestionOptions): Root[] | undefined {
    const answer = this.#resolve(key, ROOTS_REQUEST, options) as { roots: Root[] } | undefined;
    return answer?.roots;
  }

  again(key: string): void {
    const question = this.#asked.get(key);
    if (question === undefined) throw new TypeError(`need.again: "${key}" has not been asked in this round`);
    this.answers.delete(key);
    this.questions.set(key, question);
  }

  ask(options: AskOptions = {}): InputRequiredResult {
    if (!isObject(options)) throw new TypeError('need.ask: options must be an object');
    const { missingCapability } = options;
    if (missingCapability !== undefined && missingCapability !== 'fail' && missingCapability !== 'degrade') {
      throw new TypeError('need.ask: missingCapability must be "fail" or "degrade"');
    }
    const marker = { resultType: 'input_required' } as AskMarker;
    Object.defineProperty(marker, ASK, { value: { ...options }, enumerable: false });
    return marker;
  }

  keep(value: JsonValue): void {
    canonicalJson(value); // throws a TypeError for anything that is not JSON
    this.#keep = { value };
  }

  fail(message: string): CallToolResult {
    if (typeof message !== 'string') throw new TypeError('need.fail: message must be a string');
    return { content: [{ type: 'text', text: message }], isError: true };
  }

  task(work: TaskWork, options?: TaskStartOptions): CallToolResult {
    return taskMarker(work, options);
  }

  #resolve(
    key: string,
    request: InputRequest,
    options: QuestionOptions | undefined,
    explain?: (answer: unknown, limits: AnswerLimits) => string,
  ): JsonValue | undefined {
    if (typeof key !== 'string' || !KEY_PATTERN.test(key)) {
      throw new TypeError('need: key must be 1-128 printable ASCII characters');
    }
    if (options !== undefined && (options === null || typeof options !== 'object' || !PRESUPPLIED.has(options.presupplied))) {
      throw new TypeError('need: options must be { presupplied?: "ignore" | "accept" }');
    }
    const pin = questionPin(request);
    const earlier = this.#asked.get(key);
    if (earlier !== undefined && earlier.pin !== pin) {
      throw new TypeError(`need: key "${key}" was asked twice with different questions`);
    }
    if (earlier === undefined) this.#asked.set(key, { request, pin, kind: requiredKind(request) });
    if (this.questions.has(key)) return undefined;
    const pendingPin = this.#pendingPins.get(key);
    const stored = this.#stored.get(key);
    // An earlier round's answer to the same question (the client was not asked again).
    if (pendingPin === undefined && stored !== undefined && stored[0] === pin) {
      if (this.answers.has(key)) return stored[1];
    }
    // This round's answer counts only if it answers the question the last round sent under this key (its
    // digest is sealed in the state). An answer to a question not sent yet (a first call has sent nothing)
    // is a pre-supplied answer: ignored, so the question is asked, unless the question or the server opts
    // in. Omitting the state is therefore never more permissive than sending one. An answer to a question
    // that was sent in another wording is always ignored.
    const current = Object.hasOwn(this.#responses, key) ? this.#responses[key] : undefined;
    const presupplied = (options?.presupplied ?? this.#presupplied) === 'accept';
    const counts = pendingPin === undefined ? presupplied : pendingPin === pin;
    if (current !== undefined) {
      const kind = this.#asked.get(key)!.kind;
      if (counts) {
        // The check follows the question's kind (the same one a task's answers get in tasks/update).
        const answer = answerCheckFor(request)!(current, this.#limits);
        if (answer !== undefined) {
          this.seen.set(key, { key, kind, accepted: true, reason: pendingPin === undefined ? 'presupplied' : 'answered' });
          this.answers.set(key, [pin, answer]);
          return answer;
        }
        this.seen.set(key, { key, kind, accepted: false, reason: 'invalid' });
        // Asked again with the reason: an honest user learns what to fix instead of seeing the same form.
        if (explain !== undefined) {
          this.answers.delete(key);
          this.questions.set(key, { ...this.#asked.get(key)!, reason: explain(current, this.#limits) });
          return undefined;
        }
      } else {
        this.seen.set(key, { key, kind, accepted: false, reason: pendingPin === undefined ? 'not_asked' : 'other_question' });
      }
    }
    this.answers.delete(key);
    this.questions.set(key, this.#asked.get(key)!);
    return undefined;
  }
}
