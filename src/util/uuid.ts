const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` has the shape of a UUID (any version, either letter case). */
export function isUuid(value: string): boolean {
  return uuidPattern.test(value);
}
