// The requests an object reads: JSON objects whose fields are checked as they are read (a bad one: 400, nothing written).

/** A request the object cannot act on (answered 400; nothing was written). */
export class BadRequest extends Error {}

export type Message = Record<string, unknown>;
export const str = (m: Message, key: string): string => {
  const v = m[key];
  if (typeof v !== 'string') throw new BadRequest(`${key} must be a string`);
  return v;
};
export const num = (m: Message, key: string): number => {
  const v = m[key];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new BadRequest(`${key} must be a finite number`);
  return v;
};
export const count = (m: Message, key: string): number => {
  const v = num(m, key);
  if (!Number.isSafeInteger(v) || v < 0) throw new BadRequest(`${key} must be a non-negative integer`);
  return v;
};
export const flag = (m: Message, key: string): boolean => m[key] === true;
/** An optional string (absent or null: `null`). */
export const maybeStr = (m: Message, key: string): string | null => (m[key] === undefined || m[key] === null ? null : str(m, key));
/** An optional finite number (absent or null: `null`). */
export const maybeNum = (m: Message, key: string): number | null => (m[key] === undefined || m[key] === null ? null : num(m, key));
type Reader = (m: Message, key: string) => unknown;
/** The fields of a request that `spec` names, each read (and checked, in this order) by its reader. */
export function fields<S extends Record<string, Reader>>(m: Message, spec: S): { [K in keyof S]: ReturnType<S[K]> } {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(spec)) out[key] = (spec[key] as Reader)(m, key);
  return out as { [K in keyof S]: ReturnType<S[K]> };
}
