/**
 * @mrtr/store-cloudflare: single use, safe retry and tasks for MRTR on Cloudflare Workers, kept by Durable Objects.
 * Export {@link MrtrStoreObject} from the Worker, bind it, and give the binding to {@link createDurableObjectStore}
 * (the `ReplayStore`) and {@link createDurableObjectTaskStore} (the `TaskStore`).
 */
export type {
  DurableObjectNamespaceLike,
  DurableObjectStateLike,
  DurableObjectStubLike,
  ObjectResponseLike,
  SqlCursorLike,
  SqlStorageLike,
} from './binding.js';
export { createDoctorRoute, DOCTOR_PATH, type DoctorRouteOptions, MIN_DOCTOR_TOKEN_CHARS } from './doctor.js';
export { type FromSetting, perIsolate } from './env.js';
export { MrtrStoreObject } from './object.js';
export { createDurableObjectStore, type DurableObjectReplayStore, type DurableObjectStoreOptions } from './replay.js';
export { createDurableObjectTaskStore, type DurableObjectTaskStoreOptions } from './tasks.js';
