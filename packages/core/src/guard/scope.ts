import { cryptoProvider } from '#crypto';
import type { RequestBinding } from '../claims.js';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import type { RequestContext } from './types.js';
import { canonicalJson } from '../util/json.js';
import { checkResolvedPrincipal, type Principal, principalPolicy } from './principal.js';

/**
 * One request as the guard sees it: its principal (the policy applied once) and its binding (the arguments
 * digested once), computed on first use and shared by every open and mint of the request.
 */
export interface Scope {
  readonly request: RequestContext;
  who: Principal | undefined;
  binding: Awaitable<RequestBinding> | undefined;
}

/** The binding of a request: its method, its target and the digest of its canonical arguments. */
export const bindNow = (request: RequestContext): Awaitable<RequestBinding> => {
  if (request === null || typeof request !== 'object') throw new TypeError('request must be an object');
  const { method, target } = request;
  if (typeof method !== 'string' || typeof target !== 'string') {
    throw new TypeError('request.method and request.target must be strings');
  }
  return andThen(cryptoProvider.sha256Text(canonicalJson(request.arguments ?? {})), (d) => ({ m: method, t: target, d }));
};

export const scopeOf = (request: RequestContext): Scope => ({ request, who: undefined, binding: undefined });

/** The binding runs at most once per request, whatever opens and mints it does. */
export const bindingIn = (scope: Scope): Awaitable<RequestBinding> => (scope.binding ??= bindNow(scope.request));

/**
 * The principal of a request, at most once per request whatever opens and mints it does: the one the caller
 * already resolved with this policy (`request.resolvedPrincipal`, checked against it), else the policy applied here.
 */
export const principalIn = (
  readPrincipal: (request: RequestContext) => string | undefined,
  unauthenticated: 'reject' | { principal: string },
): ((scope: Scope) => Principal) => {
  const policy = principalPolicy(readPrincipal, unauthenticated);
  const checked = checkResolvedPrincipal(unauthenticated);
  const principalOf = (request: RequestContext): Principal =>
    request.resolvedPrincipal === undefined ? policy(request) : checked(request.resolvedPrincipal);
  return (scope) => (scope.who ??= principalOf(scope.request));
};
