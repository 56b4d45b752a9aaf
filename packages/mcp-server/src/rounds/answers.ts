import type { JsonValue } from '@mrtr/core';
import { isObject } from '@mrtr/core/options';

/**
 * Form schemas (flat, as the spec allows) with the types of their answers, and the answer validators.
 * Each validator returns the normalised answer (JSON, safe to seal) or `undefined` when the answer is
 * invalid, in which case the question is asked again (spec: SHOULD validate, EL8).
 *
 * Every check here runs on client input, so each is linear in the answer's size, and every string in an
 * answer is refused past `maxChars` (and when it is not well-formed UTF-16) before any format check.
 */

/** A string field of an elicitation form (`enum`/`oneOf` make it a single-select). */
export interface StringField {
  type: 'string';
  title?: string;
  description?: string;
  minLength?: number;
  maxLength?: number;
  format?: 'email' | 'uri' | 'date' | 'date-time';
  default?: string;
  enum?: readonly string[];
  enumNames?: readonly string[];
  oneOf?: readonly { const: string; title?: string }[];
}
/** A number field (`integer` rejects fractions). */
export interface NumberField {
  type: 'number' | 'integer';
  title?: string;
  description?: string;
  minimum?: number;
  maximum?: number;
  default?: number;
}
export interface BooleanField {
  type: 'boolean';
  title?: string;
  description?: string;
  default?: boolean;
}
/** A multi-select field: an array of strings out of `items.enum` / `items.anyOf[].const`. */
export interface MultiSelectField {
  type: 'array';
  title?: string;
  description?: string;
  minItems?: number;
  maxItems?: number;
  items: { type: 'string'; enum: readonly string[] } | { anyOf: readonly { const: string; title?: string }[] };
  default?: readonly string[];
}
export type FormField = StringField | NumberField | BooleanField | MultiSelectField;

/** The flat `requestedSchema` of a form elicitation (spec: no nesting). */
export interface FormSchema {
  $schema?: string;
  type: 'object';
  properties: { readonly [key: string]: FormField };
  required?: readonly string[];
}

/** The value type one field yields. */
export type FieldValue<F> = F extends { type: 'string'; enum: readonly (infer E extends string)[] }
  ? E
  : F extends { type: 'string'; oneOf: readonly { const: infer C extends string }[] }
    ? C
    : F extends { type: 'string' }
      ? string
      : F extends { type: 'number' | 'integer' }
        ? number
        : F extends { type: 'boolean' }
          ? boolean
          : F extends { type: 'array'; items: { enum: readonly (infer E extends string)[] } }
            ? E[]
            : F extends { type: 'array'; items: { anyOf: readonly { const: infer C extends string }[] } }
              ? C[]
              : F extends { type: 'array' }
                ? string[]
                : never;

type RequiredKeys<S extends FormSchema> = S['required'] extends readonly (infer K)[] ? K & keyof S['properties'] : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** The validated `content` of an accepted form: required fields present, unrequested keys removed. */
export type FormContent<S extends FormSchema> = Simplify<
  { [K in RequiredKeys<S>]: FieldValue<S['properties'][K]> } & {
    [K in Exclude<keyof S['properties'], RequiredKeys<S>>]?: FieldValue<S['properties'][K]>;
  }
>;

/** Limits every validator applies. */
export interface AnswerLimits {
  /** Longest string (UTF-16 units) anywhere in an answer. */
  maxChars: number;
}

const own = (o: object, k: string): boolean => Object.hasOwn(o, k);

/** White space as `\s` matches it (for the e-mail check). */
const SPACE = /\s/;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

function validDate(y: string, m: string, d: string): boolean {
  const year = Number(y);
  const month = Number(m);
  const day = Number(d);
  if (month < 1 || month > 12 || day < 1) return false;
  const days = new Date(Date.UTC(year, month, 0)).getUTCDate();
  return day <= days;
}

/**
 * `local@domain` with no white space and exactly one `@`, and a dot in the domain with a character on
 * each side: what `/^[^\s@]+@[^\s@]+\.[^\s@]+$/` accepts, in one pass (that regular expression
 * backtracks quadratically on inputs such as `a@a.a.a.…@`).
 */
export function isEmail(value: string): boolean {
  const at = value.indexOf('@');
  if (at <= 0 || value.indexOf('@', at + 1) !== -1 || SPACE.test(value)) return false;
  const domainStart = at + 1;
  const dot = value.lastIndexOf('.', value.length - 2);
  return dot > domainStart;
}

/** The `format` check of a string field; linear in the string's length. */
export function checkFormat(format: string, value: string): boolean {
  switch (format) {
    case 'email':
      return isEmail(value);
    case 'uri':
      try {
        // A URI needs a scheme; `new URL` enforces one.
        new URL(value);
        return /^[A-Za-z][A-Za-z0-9+.-]*:/.test(value);
      } catch {
        return false;
      }
    case 'date': {
      const m = DATE.exec(value);
      return m !== null && validDate(m[1]!, m[2]!, m[3]!);
    }
    case 'date-time': {
      const m = DATE_TIME.exec(value);
      return m !== null && validDate(m[1]!, m[2]!, m[3]!) && Number(m[4]) < 24 && Number(m[5]) < 60 && Number(m[6]) < 61;
    }
    default:
      return true;
  }
}

const codePoints = (s: string): number => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

function allowedStrings(field: FormField): readonly string[] | undefined {
  if (field.type === 'string') {
    if (field.enum !== undefined) return field.enum;
    if (field.oneOf !== undefined) return field.oneOf.map((o) => o.const);
  }
  if (field.type === 'array') {
    const items = field.items as { enum?: readonly string[]; anyOf?: readonly { const: string }[] };
    if (items.enum !== undefined) return items.enum;
    if (items.anyOf !== undefined) return items.anyOf.map((o) => o.const);
  }
  return undefined;
}

const isWellFormed = (text: string): boolean => (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/** A string an answer may hold: at most `maxChars` UTF-16 units and well-formed (no lone surrogates). */
const validString = (value: unknown, limits: AnswerLimits): value is string =>
  typeof value === 'string' && value.length <= limits.maxChars && isWellFormed(value);

const oneOf = (allowed: readonly string[]): string =>
  allowed.length <= 8 ? `one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}` : 'one of the offered values';

/**
 * What is wrong with one field's value, in words for the person answering (built from the server's own schema,
 * never from the answer), or `undefined` when it is valid.
 */
function fieldProblem(field: FormField, value: unknown, limits: AnswerLimits): string | undefined {
  switch (field.type) {
    case 'string': {
      if (!validString(value, limits)) return `must be text of at most ${limits.maxChars} characters`;
      const allowed = allowedStrings(field);
      if (allowed !== undefined && !allowed.includes(value)) return `must be ${oneOf(allowed)}`;
      if (field.minLength !== undefined || field.maxLength !== undefined) {
        const len = codePoints(value);
        if (field.minLength !== undefined && len < field.minLength) return `must be at least ${field.minLength} characters long`;
        if (field.maxLength !== undefined && len > field.maxLength) return `must be at most ${field.maxLength} characters long`;
      }
      return field.format === undefined || checkFormat(field.format, value) ? undefined : `must be a valid ${field.format}`;
    }
    case 'number':
    case 'integer': {
      if (typeof value !== 'number' || !Number.isFinite(value)) return 'must be a number';
      if (field.type === 'integer' && !Number.isInteger(value)) return 'must be a whole number';
      if (field.minimum !== undefined && value < field.minimum) return `must be at least ${field.minimum}`;
      return field.maximum === undefined || value <= field.maximum ? undefined : `must be at most ${field.maximum}`;
    }
    case 'boolean':
      return typeof value === 'boolean' ? undefined : 'must be true or false';
    case 'array': {
      if (!Array.isArray(value) || !value.every((v) => validString(v, limits))) return 'must be a list of choices';
      const allowed = allowedStrings(field);
      if (allowed !== undefined && !value.every((v) => allowed.includes(v as string))) return `may hold only ${oneOf(allowed)}`;
      if (field.minItems !== undefined && value.length < field.minItems) return `needs at least ${field.minItems} choices`;
      return field.maxItems === undefined || value.length <= field.maxItems ? undefined : `allows at most ${field.maxItems} choices`;
    }
    default:
      return 'has a type this server cannot check';
  }
}

/** Why an accepted form answer is invalid (first problem found), or `undefined` when it is valid. */
function formProblem(schema: FormSchema, content: Record<string, unknown>, limits: AnswerLimits): string | undefined {
  for (const [name, field] of Object.entries(schema.properties)) {
    if (!own(content, name) || content[name] === undefined) continue;
    const problem = fieldProblem(field, content[name], limits);
    if (problem !== undefined) return `"${field.title ?? name}" ${problem}.`;
  }
  for (const name of schema.required ?? []) {
    const field = own(schema.properties, name) ? schema.properties[name] : undefined;
    if (field === undefined || !own(content, name) || content[name] === undefined) return `"${field?.title ?? name}" is required.`;
  }
  // Keys the form did not ask for are dropped, but their strings are bounded like every other string of an answer
  // (the key is the client's text: never quoted back).
  for (const name of Object.keys(content)) {
    if (own(schema.properties, name)) continue;
    if (!validString(name, limits) || !validStrings(content[name], limits, 0)) {
      return `The answer holds a field the form did not ask for, with text over ${limits.maxChars} characters or not well-formed.`;
    }
  }
  return undefined;
}

/** Validates an answer to a form elicitation. Unrequested content keys are dropped (their strings are still bounded). */
export function validateFormAnswer(schema: FormSchema, answer: unknown, limits: AnswerLimits): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { action } = answer;
  if (action === 'decline' || action === 'cancel') return { action };
  if (action !== 'accept') return undefined;
  const content = answer.content;
  if (!isObject(content) || formProblem(schema, content, limits) !== undefined) return undefined;
  const out: Record<string, JsonValue> = {};
  for (const name of Object.keys(schema.properties)) {
    if (!own(content, name) || content[name] === undefined) continue;
    const value = content[name];
    out[name] = Array.isArray(value) ? [...(value as string[])] : (value as JsonValue);
  }
  return { action: 'accept', content: out };
}

/**
 * Why {@link validateFormAnswer} refused an answer, for the person answering: the question is sent again with
 * this in front of its message. Built from the server's schema only; the answer's text is never quoted.
 */
export function explainFormAnswer(schema: FormSchema, answer: unknown, limits: AnswerLimits): string {
  if (!isObject(answer) || !isObject(answer.content) || answer.action !== 'accept') return 'The answer could not be read.';
  return formProblem(schema, answer.content, limits) ?? 'The answer could not be read.';
}

/** Validates an answer to a URL elicitation (`content` is ignored). */
export function validateUrlAnswer(answer: unknown, _limits?: AnswerLimits): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { action } = answer;
  if (action === 'accept' || action === 'decline' || action === 'cancel') return { action };
  return undefined;
}

const SAMPLING_BLOCK_TYPES = new Set(['text', 'image', 'audio', 'tool_use', 'tool_result']);

/** True when every string in `value` passes `validString` (bounded depth; anything else JSON is fine). */
function validStrings(value: unknown, limits: AnswerLimits, depth: number): boolean {
  if (typeof value === 'string') return validString(value, limits);
  if (value === null || typeof value !== 'object') return typeof value !== 'number' || Number.isFinite(value);
  if (depth >= 16) return false;
  const items = Array.isArray(value) ? value : Object.entries(value).flat();
  return items.every((item) => validStrings(item, limits, depth + 1));
}

function validSamplingBlock(block: unknown, limits: AnswerLimits): boolean {
  if (!isObject(block) || typeof block.type !== 'string' || !SAMPLING_BLOCK_TYPES.has(block.type)) return false;
  if (!validStrings(block, limits, 0)) return false;
  switch (block.type) {
    case 'text':
      return typeof block.text === 'string';
    case 'image':
    case 'audio':
      return typeof block.data === 'string' && typeof block.mimeType === 'string';
    case 'tool_use':
      return typeof block.id === 'string' && typeof block.name === 'string' && isObject(block.input);
    default:
      return typeof block.toolUseId === 'string' && Array.isArray(block.content);
  }
}

/** Validates a `sampling/createMessage` result (role, content blocks, model). */
export function validateSamplingAnswer(answer: unknown, limits: AnswerLimits): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { role, content, model, stopReason } = answer;
  if (role !== 'assistant' && role !== 'user') return undefined;
  if (!validString(model, limits)) return undefined;
  if (stopReason !== undefined && !validString(stopReason, limits)) return undefined;
  const blocks = Array.isArray(content) ? content : [content];
  if (blocks.length === 0 || !blocks.every((block) => validSamplingBlock(block, limits))) return undefined;
  const out: Record<string, JsonValue> = { role, content: content as JsonValue, model };
  if (stopReason !== undefined) out.stopReason = stopReason;
  return out;
}

/** Validates a `roots/list` result: every root a `file://` URI (spec RO1). */
export function validateRootsAnswer(answer: unknown, limits: AnswerLimits): JsonValue | undefined {
  if (!isObject(answer) || !Array.isArray(answer.roots)) return undefined;
  const roots: JsonValue[] = [];
  for (const root of answer.roots) {
    if (!isObject(root) || !validString(root.uri, limits) || !root.uri.startsWith('file://')) return undefined;
    if (root.name !== undefined && !validString(root.name, limits)) return undefined;
    roots.push(root.name === undefined ? { uri: root.uri } : { uri: root.uri, name: root.name });
  }
  return { roots };
}
