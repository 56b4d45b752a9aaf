/**
 * Who a request is, by the adapter's rules: the principal read from the MCP request (`principal`, by default the
 * token's subject), then core's policy (`principalPolicy`: `unauthenticated`), once per request. Its answer, a core
 * `Principal`, is what the guard gets (`RequestContext.resolvedPrincipal`: the guard does not apply the policy
 * again), what a task is bound to ({@link taskOwner}), and what tells an authenticated caller from the rest.
 */
import type { AuthInfo, ServerContext } from '@modelcontextprotocol/server';
import { principalPolicy, type Principal } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';

/** The token's subject, `authInfo.extra.sub`, when it is a string: whom the default principal and a session's user name. */
export function subjectOf(authInfo: AuthInfo | undefined): string | undefined {
  const sub = (authInfo?.extra as Record<string, unknown> | undefined)?.sub;
  return typeof sub === 'string' ? sub : undefined;
}

/**
 * The default principal: the token's subject (`authInfo.extra.sub`), prefixed `sub:`. Never the client id: it
 * names the client application, which many users share, so one user could redeem another's state and all of
 * them would share one mint quota. Without a subject the request has no principal.
 */
export function defaultPrincipal(ctx: ServerContext): string | undefined {
  const sub = subjectOf(ctx.http?.authInfo);
  return sub !== undefined && sub.length > 0 ? `sub:${sub}` : undefined;
}

/**
 * The principal policy of one `createMrtr`, applied once per request by the rounds and by every task request:
 * the guard's own policy (`principalPolicy` of `@mrtr/core/adapter`) over `read` (the `principal` option) — no
 * name (`undefined` or `''`) is the fixed unauthenticated principal, or `ERR_PRINCIPAL_REQUIRED` with
 * `unauthenticated: 'reject'`; anything but a string is a server bug (`TypeError`). `unauthenticated` is the
 * option the guard is given too (the guard validates it, and refuses a resolved principal its own could not give).
 */
export function createPrincipalPolicy(
  read: (ctx: ServerContext) => string | undefined,
  unauthenticated: unknown,
): (ctx: ServerContext) => Principal {
  const fixed =
    isObject(unauthenticated) && typeof unauthenticated.principal === 'string' ? { principal: unauthenticated.principal } : 'reject';
  return principalPolicy(read, fixed, 'createMrtr');
}

/**
 * The identity a task is bound to: `p:` + the authenticated principal, or `u:` + the fixed unauthenticated one.
 * The guard's two namespaces, so no authenticated principal ever reaches the unauthenticated one's tasks.
 */
export const taskOwner = (principal: Principal): string => `${principal[0]}:${principal[1]}`;

/** Whether a request has a principal of its own (not the fixed unauthenticated one every anonymous caller shares). */
export const isAuthenticated = (principal: Principal): boolean => principal[0] === 'p';
