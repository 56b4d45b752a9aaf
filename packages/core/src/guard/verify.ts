import { isStateClaims, type StateClaims } from '../claims.js';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import {
  FlowExpiredError,
  FlowRoundsError,
  MrtrError,
  StateAudienceError,
  StateBindingError,
  StateExpiredError,
  StateMalformedError,
  StatePrincipalError,
  StateTooLargeError,
} from '../errors.js';
import type { GuardContext } from './context.js';
import { bindingIn, type Scope } from './scope.js';
import type { OpenedState } from './types.js';
import type { OpenedToken } from '../interfaces.js';
import { timingSafeEqualText } from '../util/json.js';
import type { JsonValue } from '../protocol.js';

/** Every check of a state, given the scope of its request and the presented token. */
export type Verify = <P extends JsonValue>(scope: Scope, token: unknown) => Awaitable<OpenedState<P>>;

/** A codec's failure as the guard reports it: its `MrtrError`, anything else `ERR_STATE_MALFORMED`. */
const unsealFailure = (cause: unknown): never => {
  if (MrtrError.is(cause)) throw cause;
  throw new StateMalformedError({ cause });
};

/**
 * Every check of a state but single use, in the order docs/architecture.md numbers them; the first failure
 * throws. Synchronous when the codec and the crypto are (Node), a promise otherwise: the steps are composed with
 * `andThen`, and the operations await the result once. Nothing is opened while this instance's clock is off the
 * store's (its own checks of expiry and iat would be off): it refuses first, with the reason. A verified state's
 * holder tag is remembered (`GuardContext.holderOf`).
 */
export function createVerify(ctx: GuardContext): Verify {
  const { current, audience, maxTokenBytes, maxRounds, clockSkewMs, now, principalTag, whoIn, holderTag, holds, clock } = ctx;

  /** Checks 3 to 8, on what the codec unsealed. */
  const checkClaims = <P extends JsonValue>(scope: Scope, opened: OpenedToken): Awaitable<OpenedState<P>> => {
    const { claims, kid } = opened;
    // 3. claims shape
    if (!isStateClaims(claims) || typeof kid !== 'string') throw new StateMalformedError();
    // 4. expiry and issue time
    const t = now();
    if (t > claims.exp + clockSkewMs || claims.iat > t + clockSkewMs || claims.exp < claims.iat) {
      throw new StateExpiredError();
    }
    // 5. audience
    if (claims.aud !== audience) throw new StateAudienceError();
    // 6. principal
    // (Canonical base64url has one text per byte string: comparing texts is comparing the decoded tags.)
    return andThen(principalTag(kid, whoIn(scope)), (tag) => {
      if (!timingSafeEqualText(claims.sub, tag)) throw new StatePrincipalError();
      // 7. request binding
      return andThen(bindingIn(scope), (binding): OpenedState<P> => {
        if (claims.req.m !== binding.m || claims.req.t !== binding.t || claims.req.d !== binding.d) {
          throw new StateBindingError();
        }
        // 8. flow deadline and round
        if (t > claims.flow.deadline + clockSkewMs) throw new FlowExpiredError();
        if (claims.flow.round > maxRounds) throw new FlowRoundsError();
        return { claims: claims as StateClaims<P>, data: claims.data as P, flow: claims.flow, kid };
      });
    });
  };

  /** Checks 1 to 8. */
  const verifyNow = <P extends JsonValue>(scope: Scope, token: unknown): Awaitable<OpenedState<P>> => {
    // 1. size cap, before any decoding (string length ≥ UTF-8 byte length for ASCII; non-ASCII is malformed anyway)
    if (typeof token !== 'string' || token.length === 0) throw new StateMalformedError();
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    // 2. integrity (the codec)
    let unsealed: Awaitable<OpenedToken>;
    try {
      unsealed = current().codec.unseal(token);
    } catch (cause) {
      return unsealFailure(cause);
    }
    return andThen(unsealed, (opened) => checkClaims<P>(scope, opened), unsealFailure);
  };
  return <P extends JsonValue>(scope: Scope, token: unknown): Awaitable<OpenedState<P>> => {
    clock.assertWithin();
    return andThen(verifyNow<P>(scope, token), (state) =>
      andThen(holderTag(whoIn(scope)), (holder) => holds(state, holder) as OpenedState<P>),
    );
  };
}
