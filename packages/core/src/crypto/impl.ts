// The Node build uses this file; the WebCrypto build swaps it for ./web.ts (see tsup.config.ts).
export { cryptoProvider } from './node.js';
