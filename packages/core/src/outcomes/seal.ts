import { storeCapabilities } from '../capabilities.js';
import { cryptoProvider } from '#crypto';
import { CLAIMS_VERSION, type StateClaims } from '../claims.js';
import type { Awaitable } from '../crypto/awaitable.js';
import { MrtrError, StateReplayedError } from '../errors.js';
import type { OutcomeDropReason } from '../events.js';
import type { GuardContext } from '../guard/context.js';
import type { OpenedState } from '../guard/types.js';
import type { ReplayStore } from '../interfaces.js';
import { canonicalJson } from '../util/json.js';
import type { JsonValue } from '../protocol.js';
import { base64urlEncode, randomBytes } from '../util/random.js';
import { isObject } from '../util/validate.js';

/** Suffix of the audience of a sealed outcome: never the audience of a state, so it can never pass as one. */
export const OUTCOME_AUDIENCE = '#outcome';

/**
 * The attempt's fingerprint. Answers that have no canonical form (nested past canonicalJson's depth, or not
 * JSON) get a random one that no retry can match: that round runs once and its retries are replays.
 */
export const fingerprint = (sub: string, answers: JsonValue): Awaitable<string> => {
  let canonical: string;
  try {
    canonical = canonicalJson(['mrtr/outcome/v1', sub, answers]);
  } catch {
    canonical = `mrtr/outcome/v1/unmatchable/${base64urlEncode(randomBytes(16))}`;
  }
  return cryptoProvider.sha256Text(canonical);
};

const isTime = (v: number): boolean => Number.isSafeInteger(v) && v >= 0;

/**
 * `JSON.stringify` of an outcome's claims — `{ v, iat, exp, jti, aud, sub, req, flow, data: { f, o } }`, members in
 * that order — with the outcome's JSON (`outcomeJson`, already written for the size check) put in as it is: the same
 * text, so the same token, as sealing the claims object (the outcomes sealed before read the same), its outcome
 * written once. The state's claims were checked when it was opened; `iat` is checked by the caller.
 */
const claimsJson = (claims: StateClaims, iat: number, aud: string, fp: string, outcomeJson: string): string => {
  const head = JSON.stringify({
    v: CLAIMS_VERSION,
    iat,
    exp: claims.exp,
    jti: claims.jti,
    aud,
    sub: claims.sub,
    req: claims.req,
    flow: claims.flow,
  });
  return `${head.slice(0, -1)},"data":{"f":${JSON.stringify(fp)},"o":${outcomeJson}}}`;
};

const UNSEALABLE: Sealed = Object.freeze({ token: '', dropped: 'unsealable' });
const TOO_LARGE: Sealed = Object.freeze({ token: '', dropped: 'too_large' });

/** What {@link OutcomeSeal.seal} made: the sealed outcome, or `''`, why it will not be kept and its sealed length if sealed. */
export type Sealed =
  | { token: string; dropped?: undefined; bytes?: undefined }
  | { token: ''; dropped: OutcomeDropReason; bytes?: number | undefined };

/** An outcome sealed for the store, and a recorded one opened and checked against the state and the fingerprint. */
export interface OutcomeSeal {
  /** `holder`: the principal's tag for the byte budget (see `createHolderTagger`). */
  seal(state: OpenedState, holder: string, fp: string, outcome: JsonValue): Promise<Sealed>;
  unseal(state: OpenedState, fp: string, token: string): Promise<JsonValue>;
}

/** Outcomes sealed with the guard's codec under the audience `${audience}#outcome`, which no state can carry. */
export function createOutcomeSeal(ctx: GuardContext, store: ReplayStore): OutcomeSeal {
  const { codec, audience, now, outcomeQuota: budget } = ctx;
  const outcomeAudience = `${audience}${OUTCOME_AUDIENCE}`;
  // The store's bound is declared once (its capabilities are frozen): read it here, not on every seal.
  const storeMax = storeCapabilities(store).outcomes?.maxOutcomeBytes ?? Number.POSITIVE_INFINITY;
  const maxKept = (): number => Math.min(codec.maxTokenBytes, storeMax);

  /**
   * The sealed outcome, or `''` (done, not kept) with the reason when it would not be kept: larger than the store
   * keeps (told before sealing when even the JSON is too large: a sealed token is at least a quarter of its JSON,
   * whatever the codec's encoding), past the principal's byte budget, or not JSON or a codec failure.
   */
  const seal = async (state: OpenedState, holder: string, fp: string, outcome: JsonValue): Promise<Sealed> => {
    const { claims } = state;
    const limit = maxKept();
    let json: string;
    try {
      json = JSON.stringify(outcome);
    } catch {
      return UNSEALABLE;
    }
    if (typeof json !== 'string') return UNSEALABLE;
    if (json.length > 4 * limit) return TOO_LARGE;
    const iat = now();
    let token: string;
    try {
      token = await (codec.sealJson !== undefined && isTime(iat)
        ? codec.sealJson(claimsJson(claims, iat, outcomeAudience, fp, json))
        : codec.seal({
            v: CLAIMS_VERSION,
            iat,
            exp: claims.exp,
            jti: claims.jti,
            aud: outcomeAudience,
            sub: claims.sub,
            req: claims.req,
            flow: claims.flow,
            data: { f: fp, o: outcome },
          } satisfies StateClaims));
    } catch (error) {
      return MrtrError.is(error) && error.code === 'ERR_STATE_TOO_LARGE' ? TOO_LARGE : UNSEALABLE;
    }
    if (token.length > limit) return TOO_LARGE;
    // The principal's share of what stores hold: charged only for what is kept.
    if (!budget.take(holder, now(), token.length)) {
      return { token: '', dropped: 'principal_quota', bytes: token.length };
    }
    return { token };
  };

  /** The recorded outcome, if it is authentic and belongs to this state and fingerprint; else a replay. */
  const unseal = async (state: OpenedState, fp: string, token: string): Promise<JsonValue> => {
    let claims: StateClaims;
    try {
      claims = (await codec.unseal(token)).claims;
    } catch (cause) {
      throw new StateReplayedError({ cause });
    }
    const data = claims.data;
    if (
      claims.aud !== outcomeAudience ||
      claims.jti !== state.claims.jti ||
      claims.sub !== state.claims.sub ||
      !isObject(data) ||
      data.f !== fp ||
      !('o' in data)
    ) {
      throw new StateReplayedError();
    }
    return data.o as JsonValue;
  };
  return { seal, unseal };
}
