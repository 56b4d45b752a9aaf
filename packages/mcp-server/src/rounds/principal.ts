import type { AuthInfo, ServerContext } from '@modelcontextprotocol/server';
import { principalPolicy } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';

/**
 * Who a request is, as the adapter binds it: the one answer both an MRTR round (through the guard) and a task
 * (through the task store) are bound to.
 */
export interface RequestPrincipal {
  /**
   * What the guard's request context carries (`RequestContext.principal`): the authenticated principal, or
   * `undefined` for the fixed unauthenticated one, which the guard then takes from the same `unauthenticated`.
   */
  readonly principal: string | undefined;
  /**
   * The identity a task is bound to: `p:` + the authenticated principal, or `u:` + the fixed unauthenticated one.
   * The guard's two namespaces (`p`, `u`), so no authenticated principal ever reaches the unauthenticated one's tasks.
   */
  readonly key: string;
}

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
 * guard's option as the guard validated it (`undefined` is `'reject'`).
 */
export function createPrincipalPolicy(
  read: (ctx: ServerContext) => string | undefined,
  unauthenticated: 'reject' | { principal: string } | undefined,
): (ctx: ServerContext) => RequestPrincipal {
  const fixed = isObject(unauthenticated) && typeof unauthenticated.principal === 'string' ? unauthenticated : 'reject';
  const policy = principalPolicy(read, fixed, 'createMrtr');
  return (ctx) => {
    const [namespace, name] = policy(ctx);
    return { principal: namespace === 'p' ? name : undefined, key: `${namespace}:${name}` };
  };
}
