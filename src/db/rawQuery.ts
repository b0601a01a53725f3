import type { Knex } from 'knex';

/**
 * A short way around knex for the hottest statements (event reads and appends, job claims and
 * successes): on PGlite a statement through knex costs about 0.2 ms of the API thread's CPU
 * before PGlite sees it (query compilation, the runner, its events, knex-pglite's response
 * shaping), as much as many of these statements take to execute (docs/performance.md, "Ingest").
 *
 * `rawQuery(runner, sql, bindings)` has the contract of `runner.raw(sql, bindings)` for
 * `?`-placeholder SQL and the `{ rows }` answer: the rows are the driver's, as knex returns them
 * for a raw statement. A runner registered by `openDatabase` (its PGlite knex) sends the
 * statement straight to PGlite, behind the same priority gate as knex's statements, so it
 * queues with them in the same order and waits for a transaction that holds the connection.
 * Any other runner (a transaction, a PostgreSQL server's knex, a test's own knex) goes
 * through `runner.raw` as before.
 *
 * Only for SQL whose `?` are all placeholders: no `??` identifiers, no `?` inside literals,
 * no jsonb `?` operators (the conversion does not parse SQL; it refuses `??` and a count
 * that does not match the bindings).
 */
export type RawRunner = (sql: string, bindings: readonly unknown[]) => Promise<{ rows: unknown[] }>;

const direct = new WeakMap<object, RawRunner>();

/** openDatabase registers its PGlite knex here. */
export function registerRawRunner(knex: Knex, run: RawRunner): void {
  direct.set(knex, run);
}

export async function rawQuery<Row>(runner: Knex | Knex.Transaction, sql: string, bindings: readonly unknown[] = []): Promise<{ rows: Row[] }> {
  const run = direct.get(runner);
  if (run) return (await run(numberedSql(sql, bindings.length), bindings)) as { rows: Row[] };
  return (await runner.raw(sql, bindings as Knex.RawBinding[])) as { rows: Row[] };
}

const numbered = new Map<string, { text: string; placeholders: number }>();

/** `?` placeholders as PostgreSQL's `$1, $2 …`, once per distinct statement. */
export function numberedSql(sql: string, bindingCount: number): string {
  let converted = numbered.get(sql);
  if (converted === undefined) {
    if (sql.includes('??')) throw new Error('rawQuery takes no ?? identifier bindings');
    let placeholders = 0;
    const text = sql.replace(/\?/g, () => `$${++placeholders}`);
    converted = { text, placeholders };
    // The statements are a fixed set of literals in the source: the cache stays small.
    numbered.set(sql, converted);
  }
  if (converted.placeholders !== bindingCount) {
    throw new RangeError(`rawQuery: ${converted.placeholders} placeholders for ${bindingCount} bindings`);
  }
  return converted.text;
}
