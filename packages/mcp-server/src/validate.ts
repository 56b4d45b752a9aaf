import type { JsonValue } from '@mrtr/core';
import type { FormField, FormSchema } from './types.js';

/**
 * Answer validation. Each function returns the normalised answer (JSON, safe to seal) or `undefined` when
 * the answer is invalid, in which case the question is asked again (spec: SHOULD validate, EL8).
 */

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const own = (o: object, k: string): boolean => Object.hasOwn(o, k);

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
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

function checkFormat(format: string, value: string): boolean {
  switch (format) {
    case 'email':
      return EMAIL.test(value);
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

function validField(field: FormField, value: unknown): boolean {
  switch (field.type) {
    case 'string': {
      if (typeof value !== 'string') return false;
      const allowed = allowedStrings(field);
      if (allowed !== undefined && !allowed.includes(value)) return false;
      if (field.minLength !== undefined || field.maxLength !== undefined) {
        const len = codePoints(value);
        if (field.minLength !== undefined && len < field.minLength) return false;
        if (field.maxLength !== undefined && len > field.maxLength) return false;
      }
      return field.format === undefined || checkFormat(field.format, value);
    }
    case 'number':
    case 'integer': {
      if (typeof value !== 'number' || !Number.isFinite(value)) return false;
      if (field.type === 'integer' && !Number.isInteger(value)) return false;
      if (field.minimum !== undefined && value < field.minimum) return false;
      return field.maximum === undefined || value <= field.maximum;
    }
    case 'boolean':
      return typeof value === 'boolean';
    case 'array': {
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) return false;
      const allowed = allowedStrings(field);
      if (allowed !== undefined && !value.every((v) => allowed.includes(v as string))) return false;
      if (field.minItems !== undefined && value.length < field.minItems) return false;
      return field.maxItems === undefined || value.length <= field.maxItems;
    }
    default:
      return false;
  }
}

/** Validates an answer to a form elicitation. Unrequested content keys are dropped. */
export function validateFormAnswer(schema: FormSchema, answer: unknown): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { action } = answer;
  if (action === 'decline' || action === 'cancel') return { action };
  if (action !== 'accept') return undefined;
  const content = answer.content;
  if (!isObject(content)) return undefined;
  const out: Record<string, JsonValue> = {};
  for (const [name, field] of Object.entries(schema.properties)) {
    if (!own(content, name) || content[name] === undefined) continue;
    const value = content[name];
    if (!validField(field, value)) return undefined;
    out[name] = Array.isArray(value) ? [...(value as string[])] : (value as JsonValue);
  }
  for (const name of schema.required ?? []) {
    if (!own(out, name)) return undefined;
  }
  return { action: 'accept', content: out };
}

/** Validates an answer to a URL elicitation (`content` is ignored). */
export function validateUrlAnswer(answer: unknown): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { action } = answer;
  if (action === 'accept' || action === 'decline' || action === 'cancel') return { action };
  return undefined;
}

const SAMPLING_BLOCK_TYPES = new Set(['text', 'image', 'audio', 'tool_use', 'tool_result']);

function validSamplingBlock(block: unknown): boolean {
  if (!isObject(block) || typeof block.type !== 'string' || !SAMPLING_BLOCK_TYPES.has(block.type)) return false;
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
export function validateSamplingAnswer(answer: unknown): JsonValue | undefined {
  if (!isObject(answer)) return undefined;
  const { role, content, model, stopReason } = answer;
  if (role !== 'assistant' && role !== 'user') return undefined;
  if (typeof model !== 'string') return undefined;
  if (stopReason !== undefined && typeof stopReason !== 'string') return undefined;
  const blocks = Array.isArray(content) ? content : [content];
  if (blocks.length === 0 || !blocks.every(validSamplingBlock)) return undefined;
  const out: Record<string, JsonValue> = { role, content: content as JsonValue, model };
  if (stopReason !== undefined) out.stopReason = stopReason;
  return out;
}

/** Validates a `roots/list` result: every root a `file://` URI (spec RO1). */
export function validateRootsAnswer(answer: unknown): JsonValue | undefined {
  if (!isObject(answer) || !Array.isArray(answer.roots)) return undefined;
  const roots: JsonValue[] = [];
  for (const root of answer.roots) {
    if (!isObject(root) || typeof root.uri !== 'string' || !root.uri.startsWith('file://')) return undefined;
    if (root.name !== undefined && typeof root.name !== 'string') return undefined;
    roots.push(root.name === undefined ? { uri: root.uri } : { uri: root.uri, name: root.name });
  }
  return { roots };
}
