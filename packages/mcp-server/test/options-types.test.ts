import type { StateGuardOptions } from '@mrtr/core';
import { describe, expectTypeOf, it } from 'vitest';
import type { MrtrOptions } from '../src/index.js';

/** The guard options the adapter takes in MCP's terms (its own `principal` and `onEvent`). */
type AdapterOwned = 'principal' | 'onEvent';
/** Every other option of the guard: `MrtrOptions` takes them from `StateGuardOptions` itself. */
type Shared = Exclude<keyof StateGuardOptions, AdapterOwned>;

// Checked by `tsc` (the package's typecheck); at run time these are no-ops.
describe('MrtrOptions extends the guard options', () => {
  it('takes every guard option but principal and onEvent with the guard’s own type (one declaration, in core)', () => {
    expectTypeOf<AdapterOwned>().toExtend<keyof StateGuardOptions>();
    expectTypeOf<Pick<MrtrOptions, Shared>>().toEqualTypeOf<Pick<StateGuardOptions, Shared>>();
  });

  it('adds exactly the adapter’s own options', () => {
    expectTypeOf<Exclude<keyof MrtrOptions, keyof StateGuardOptions>>().toEqualTypeOf<
      'missingCapability' | 'presupplied' | 'maxAnswerChars' | 'recordOutcomes' | 'onReject' | 'tasks'
    >();
  });

  it('is satisfied by a guard option object with the adapter’s principal and hooks', () => {
    const guardPart = {} as Omit<StateGuardOptions, AdapterOwned>;
    expectTypeOf({ ...guardPart, principal: () => 'sub:a', onEvent: () => undefined }).toExtend<MrtrOptions>();
  });
});
