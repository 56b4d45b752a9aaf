import type { CreateMessageRequestParams } from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import type { InputRequest } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';
import {
  type AnswerLimits,
  type FormSchema,
  validateFormAnswer,
  validateRootsAnswer,
  validateSamplingAnswer,
  validateUrlAnswer,
} from './answers.js';

/** An answer to a form elicitation. `decline`/`cancel` reach the handler as such. */
export type ElicitAnswer<T> = { action: 'accept'; content: T } | { action: 'decline' } | { action: 'cancel' };
/** An answer to a URL elicitation: `accept` is consent, not completion (spec EL7). */
export interface UrlAnswer {
  action: 'accept' | 'decline' | 'cancel';
}

/** A form elicitation question. */
export interface ElicitFormQuestion<S extends FormSchema> {
  mode?: 'form';
  message: string;
  requestedSchema: S;
}
/** A URL elicitation question (never put credentials or PII in `url`). */
export interface ElicitUrlQuestion {
  message: string;
  url: string;
}

/**
 * The embedded requests a handler or a task's work asks, built and checked in one place for `need.*` (MRTR rounds)
 * and `task.*` (input during a task). `label` names the caller in the `TypeError` a malformed question gets.
 */

/** `elicitation/create` in form mode. */
export function formRequest(label: string, question: unknown): InputRequest {
  if (!isObject(question) || typeof question.message !== 'string') {
    throw new TypeError(`${label}: question must be { message, requestedSchema }`);
  }
  const schema = question.requestedSchema;
  if (!isObject(schema) || schema.type !== 'object' || !isObject(schema.properties)) {
    throw new TypeError(`${label}: requestedSchema must be { type: "object", properties }`);
  }
  if (question.mode !== undefined && question.mode !== 'form') throw new TypeError(`${label}: mode must be "form"`);
  const params: Record<string, unknown> = { message: question.message, requestedSchema: schema };
  if (question.mode === 'form') params.mode = 'form';
  return { method: 'elicitation/create', params } as unknown as InputRequest;
}

/** `elicitation/create` in URL mode. */
export function urlRequest(label: string, question: unknown): InputRequest {
  if (!isObject(question) || typeof question.message !== 'string' || typeof question.url !== 'string') {
    throw new TypeError(`${label}: question must be { message, url }`);
  }
  try {
    new URL(question.url);
  } catch {
    throw new TypeError(`${label}: url must be an absolute URL`);
  }
  return { method: 'elicitation/create', params: { mode: 'url', message: question.message, url: question.url } } as InputRequest;
}

/** `sampling/createMessage` (with `tools` or `toolChoice` it needs `sampling.tools`). */
export function samplingRequest(label: string, params: CreateMessageRequestParams): InputRequest {
  if (!isObject(params) || !Array.isArray(params.messages) || typeof params.maxTokens !== 'number') {
    throw new TypeError(`${label}: params must be { messages, maxTokens, ... }`);
  }
  return { method: 'sampling/createMessage', params } as unknown as InputRequest;
}

/** `roots/list`. */
export const ROOTS_REQUEST: InputRequest = Object.freeze({ method: 'roots/list' }) as InputRequest;

/** Checks an answer and returns it normalised, or `undefined` when it is not a valid answer. */
export type AnswerCheck = (answer: unknown, limits: AnswerLimits) => JsonValue | undefined;

/**
 * The check for answers to `request`, read from the request itself (a task's question as its store keeps it, so any
 * instance can take the answer); `undefined` for a request that is none of the four kinds.
 */
export function answerCheckFor(request: { method: string; params?: unknown }): AnswerCheck | undefined {
  const params = isObject(request.params) ? request.params : undefined;
  switch (request.method) {
    case 'elicitation/create': {
      if (params?.mode === 'url') return validateUrlAnswer;
      const schema = params?.requestedSchema;
      return isObject(schema) ? (answer, limits) => validateFormAnswer(schema as unknown as FormSchema, answer, limits) : undefined;
    }
    case 'sampling/createMessage':
      return validateSamplingAnswer;
    case 'roots/list':
      return validateRootsAnswer;
    default:
      return undefined;
  }
}
