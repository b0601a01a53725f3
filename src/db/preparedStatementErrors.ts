/** What PostgreSQL answers about prepared statements, for PGlite's (./pglitePrepared.ts) and a server's (./serverPrepared.ts). */

/** An error's SQLSTATE, where it has one. */
export function sqlState(error: unknown): unknown {
  return typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined;
}

/** PostgreSQL refuses to run a prepared statement whose result's row type changed (SQLSTATE 0A000): a table it reads was altered. */
export function isChangedResultType(error: unknown): boolean {
  return sqlState(error) === '0A000' && error instanceof Error && /cached plan must not change result type/.test(error.message);
}
