import type { KeyRing, ReplayStore, StateCodec } from '@mrtr/core';
import { codecCompliance, storeCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';

declare function createMyCodec(options: { keys: KeyRing }): StateCodec;
declare function createMyStore(options: { namespace: string }): ReplayStore;

codecCompliance(it, (keys) => createMyCodec({ keys }));
storeCompliance(it, ({ namespace }) => createMyStore({ namespace }), {
  unreachable: () => createMyStore({ namespace: 'down' }), // point this one at a dead backend
});
