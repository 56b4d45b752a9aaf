import { cryptoProvider } from '#crypto';
import { CLAIMS_VERSION, type FlowClaims, type StateClaims } from '../claims.js';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { FlowExpiredError, FlowRoundsError, MrtrError, QuotaExceededError, SealFailedError, StateTooLargeError } from '../errors.js';
import type { GuardContext } from './context.js';
import { bindingIn, type Scope } from './scope.js';
import type { MintedState, MintOptions } from './types.js';
import { assertJson } from '../util/json.js';
import type { JsonValue } from '../protocol.js';

/** Seals the next state of a request; `out` shapes the answer from the token, its flow and the kid it was sealed with. */
export type Mint = <P extends JsonValue, R>(
  scope: Scope,
  data: P,
  mintOptions: MintOptions | undefined,
  out: (token: string, flow: FlowClaims, kid: string) => R,
) => Awaitable<R>;

/** The answers a mint shapes: the token and its flow (`mintFlow`), with the kid (events), or the token alone (`mint`). */
export const withFlow = (token: string, flow: FlowClaims): MintedState => ({ token, flow });
export const withKid = (token: string, flow: FlowClaims, kid: string): MintedState & { kid: string } => ({ token, flow, kid });
export const tokenOnly = (token: string): string => token;

/** A seal that fails for valid JSON data (a lone surrogate for some codecs, a state past the cap) is a server fault. */
const sealFailure = (cause: unknown): never => {
  if (MrtrError.is(cause) && cause.code !== 'ERR_STATE_TOO_LARGE') throw cause;
  throw new SealFailedError({ cause });
};

/** The flow of the next state: a new one, or the continued one (round + 1, its limits checked). */
function nextFlow(previous: MintOptions['continues'], t: number, flowTtlMs: number, maxRounds: number): FlowClaims {
  if (previous === undefined) {
    return { id: cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(16)), round: 1, deadline: t + flowTtlMs };
  }
  const flow = { id: previous.flow.id, round: previous.flow.round + 1, deadline: previous.flow.deadline };
  if (flow.round > maxRounds) throw new FlowRoundsError();
  if (t > flow.deadline) throw new FlowExpiredError();
  return flow;
}

/**
 * The mint pipeline: the flow, the data checked as JSON, the principal tag under the primary kid, the binding,
 * the claims, the mint quota, the seal and a final length check. Synchronous when the codec and the crypto are,
 * like the checks of an open. Nothing is minted while this instance's clock is off the store's by more than the
 * tolerance, nor before the store's ledger epoch exists.
 */
export function createMint(ctx: GuardContext): Mint {
  const { current, audience, ttlMs, flowTtlMs, maxRounds, maxTokenBytes, quota, now, principalTag, whoIn, holderTag, ledgerEpoch } = ctx;
  const mintNow = <P extends JsonValue, R>(
    scope: Scope,
    data: P,
    mintOptions: MintOptions | undefined,
    out: (token: string, flow: FlowClaims, kid: string) => R,
  ): Awaitable<R> => {
    const principal = whoIn(scope);
    // One view for the whole mint: the principal tag is keyed by the kid the codec seals with.
    const { ring, codec: sealer } = current();
    const kid = ring.primaryKid;
    const t = now();
    const flow = nextFlow(mintOptions?.continues, t, flowTtlMs, maxRounds);
    // Validates that `data` is JSON (throws TypeError otherwise) before sealing.
    assertJson(data);
    const checkSealed = (token: string): R => {
      if (token.length > maxTokenBytes) throw new SealFailedError({ cause: new StateTooLargeError() });
      return out(token, flow, kid);
    };
    return andThen(principalTag(kid, principal), (sub) =>
      andThen(bindingIn(scope), (req) => {
        const claims: StateClaims<P> = {
          v: CLAIMS_VERSION,
          iat: t,
          // Not capped at the flow deadline: open checks the deadline itself and reports ERR_FLOW_EXPIRED.
          exp: t + ttlMs,
          jti: cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(16)),
          aud: audience,
          sub,
          req,
          flow,
          data,
        };
        const le = ledgerEpoch.value;
        if (le !== undefined) claims.le = le;
        const seal = (): Awaitable<R> => {
          let sealed: Awaitable<string>;
          try {
            sealed = sealer.seal(claims);
          } catch (cause) {
            // The data is JSON (checked above): see sealFailure.
            return sealFailure(cause);
          }
          return andThen(sealed, checkSealed, sealFailure);
        };
        if (quota === undefined) return seal();
        return andThen(holderTag(principal), (holder) => {
          if (!quota.take(holder, t)) throw new QuotaExceededError();
          return seal();
        });
      }),
    );
  };
  return (scope, data, mintOptions, out) => {
    ctx.clock.assertWithin();
    const learning = ledgerEpoch.ready();
    return learning === undefined ? mintNow(scope, data, mintOptions, out) : learning.then(() => mintNow(scope, data, mintOptions, out));
  };
}
