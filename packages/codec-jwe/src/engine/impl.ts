// The Node build uses this file; the default (WebCrypto) build swaps it for ./web.ts (see tsup.config.ts).
export { engine } from './node.js';
