// The one runtime API the Worker imports, declared here so that the example type-checks without
// @cloudflare/workers-types (a project created with `npm create cloudflare` has it: delete this file there).
declare module 'cloudflare:workers' {
  /** Keeps the current request's work alive until `promise` settles (after the response has been sent). */
  export function waitUntil(promise: Promise<unknown>): void;
}
