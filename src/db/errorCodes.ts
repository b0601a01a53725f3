/** SQLSTATE of a statement that would break a unique constraint or index. */
export const UNIQUE_VIOLATION = '23505';

/** The SQLSTATE of a database error (PostgreSQL's driver and PGlite both set `code`), if it has one. */
export function databaseErrorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  const code = (error as { code: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}
