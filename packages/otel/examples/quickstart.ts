import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing } from '@mrtr/core';
import { createMrtrTelemetry } from '@mrtr/otel';

// Records through the global MeterProvider and TracerProvider that your OpenTelemetry SDK registered
// (a no-op without one). With @mrtr/mcp-server: createMrtr({ ..., onEvent: createMrtrTelemetry() }).
const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // npx @mrtr/cli keygen
const onEvent = createMrtrTelemetry();
const guard = createStateGuard({ keys, codec: createHmacCodec, audience: 'https://files.example', onEvent });
const request = { method: 'tools/call', target: 'delete_files', arguments: { path: '/tmp' }, principal: 'alice' };
const state = await guard.open(await guard.mint({ step: 1 }, request), request);
console.log(state.flow.round); // 1: mrtr.flows.started, mrtr.states.minted and mrtr.states.opened are now 1
