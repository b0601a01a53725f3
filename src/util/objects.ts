/**
 * A JSON-style object: not null, not an array, not a class instance (a Uint8Array, a Date), so
 * its own keys are all it holds. Parsed JSON, YAML and event payloads are checked with it before
 * their fields are read.
 */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
