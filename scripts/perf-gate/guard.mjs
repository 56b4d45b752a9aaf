// perf-gate workload: the state guard of @mrtr/core on @mrtr/store-memory with @mrtr/codec-hmac (built dist).
//   guard.mint    mint(data, request): a round-1 state (flow, claims, principal tag, binding digest, quota, seal)
//   guard.open    open(token, request): every check, then single use (the store's consume)
//   guard.admit   admit(token, request, answers): every check, then claim (single use that records outcomes)
//   guard.record  admission.record(outcome): the outcome sealed and recorded for identical retries
// Each open and admit takes a token of its own (minted before the path's warm-up, outside every interval).
import { counts, ANSWERS, AUDIENCE, DATA, measure, OUTCOME, pkg, QUIET, REQUEST, report, secret, wanted, now } from './harness.mjs';

const COUNTS = counts(1000, 500);

const { createStateGuard, KeyRing } = await import(pkg('core'));
const { createHmacCodec } = await import(pkg('codec-hmac'));
const { createMemoryStore } = await import(pkg('store-memory'));

const keys = new KeyRing([{ kid: 'k1', secret: secret('k1') }]);
// Room for every id of the run; the default mint quota (a hundredth of it) and an outcome budget that every
// recorded outcome fits in, so that no path turns into its refusal partway through.
const store = createMemoryStore({ maxEntries: 10_000_000, outcomeBudgetBytes: 2 ** 40, now });
const guard = createStateGuard({
  keys,
  codec: createHmacCodec,
  store,
  audience: AUDIENCE,
  outcomeQuota: { maxBytes: Number.MAX_SAFE_INTEGER },
  ...QUIET,
});
const total = COUNTS.warmup + COUNTS.iterations;
const mintAll = async () => {
  const tokens = [];
  for (let i = 0; i < total; i++) tokens.push(await guard.mint(DATA, REQUEST));
  return tokens;
};

if (wanted('guard.mint')) await measure('guard.mint', COUNTS, () => guard.mint(DATA, REQUEST));

if (wanted('guard.open')) {
  const tokens = await mintAll();
  await measure('guard.open', COUNTS, (i) => guard.open(tokens[i], REQUEST));
}

if (wanted('guard.admit') || wanted('guard.record')) {
  const tokens = await mintAll();
  const admissions = new Array(total);
  await measure('guard.admit', COUNTS, async (i) => {
    admissions[i] = await guard.admit(tokens[i], REQUEST, ANSWERS);
  });
  for (const admission of admissions) {
    if (admission.replay !== false) throw new Error('perf-gate guard: a first admit must own its round');
  }
  await measure('guard.record', COUNTS, async (i) => {
    if ((await admissions[i].record(OUTCOME)) !== true) throw new Error('perf-gate guard: an outcome was not kept');
  });
}

report();
