// perf-gate workload: each codec's seal and open (unseal) of the claims a guard mints for the fixed round
// (built dist, Node builds). codec.<id>.seal seals those claims; codec.<id>.open unseals one token of them (a codec
// has no single use: the same token every time).
import { counts, AUDIENCE, DATA, measure, now, pkg, REQUEST, report, secret, wanted } from './harness.mjs';

const COUNTS = counts(1000, 300);

const { createStateGuard, KeyRing } = await import(pkg('core'));
const codecs = [
  ['hmac', (await import(pkg('codec-hmac'))).createHmacCodec],
  ['jwe', (await import(pkg('codec-jwe'))).createJweCodec],
  ['aead', (await import(pkg('codec-aead'))).createAeadCodec],
];
const keys = new KeyRing([{ kid: 'k1', secret: secret('k1') }]);

for (const [id, factory] of codecs) {
  const seal = `codec.${id}.seal`;
  const open = `codec.${id}.open`;
  if (!wanted(seal) && !wanted(open)) continue;
  const guard = createStateGuard({ keys, codec: factory, audience: AUDIENCE, now });
  const { codec } = guard;
  const token = await guard.mint(DATA, REQUEST);
  const { claims } = await codec.unseal(token);
  if (wanted(seal)) await measure(seal, COUNTS, () => codec.seal(claims));
  if (wanted(open)) await measure(open, COUNTS, () => codec.unseal(token));
}

report();
