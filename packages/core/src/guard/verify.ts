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
import type { GuardKeys } from './keys.js';
import { bindingIn, type Scope } from './scope.js';
import type { OpenedState } from './types.js';
import type { OpenedToken } from '../interfaces.js';
import { timingSafeEqualText } from '../util/json.js';
import type { Principal } from './principal.js';
import type { JsonValue } from '../protocol.js';

/** What the checks of a state read: the guard's policy, its keys, its clock and the request's principal. */
export interface CheckDeps {
  readonly keys: GuardKeys;
  readonly audience: string;
  readonly maxTokenBytes: number;
  readonly maxRounds: number;
  readonly clockSkewMs: number;
  readonly now: () => number;
  readonly principalTag: (kid: string, principal: Principal) => Awaitable<string>;
  readonly whoIn: (scope: Scope) => Principal;
}

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
 * `andThen`, and the operations await the result once.
 */
export function createChecks(deps: CheckDeps): Verify {
  const { keys, audience, maxTokenBytes, maxRounds, clockSkewMs, now, principalTag, whoIn } = deps;

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
      unsealed = keys.current().codec.unseal(token);
    } catch (cause) {
      return unsealFailure(cause);
    }
    return andThen(unsealed, (opened) => checkClaims<P>(scope, opened), unsealFailure);
  };
  return verifyNow;
}
