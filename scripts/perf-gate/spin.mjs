// perf-gate self-test workload: what one round of the self-test's slowdown costs (scripts/perf-gate/slowdown.mjs),
// so that the self-test can size the slowdown it injects into the guard's open. Not a gated path.
import { counts, measure, report } from './harness.mjs';
import { perfGateSpin, SPIN_ROUNDS } from './slowdown.mjs';

await measure('spin', counts(300, 300), () => perfGateSpin(SPIN_ROUNDS));
report();
