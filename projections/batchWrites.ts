import type { Knex } from 'knex';

/**
 * Updates many rows of `table` in one statement: each row gives the key and the new values of
 * `columns` (name → PostgreSQL type; the rows travel as one JSON array). Of two rows for one key
 * the later wins, as two updates one after the other would leave it.
 *
 * The keys also go as an array: the planner cannot see how many rows jsonb_to_recordset yields
 * (it assumes 100) and joined it by scanning the whole table, so each batch cost as much as the
 * table was large; `key = ANY(keys)` makes it an index lookup.
 */
export async function updateRows(
  trx: Knex,
  table: string,
  key: string,
  columns: Readonly<Record<string, string>>,
  rows: ReadonlyArray<Record<string, unknown>>,
): Promise<void> {
  if (rows.length === 0) return;
  const latest = [...new Map(rows.map((row) => [String(row[key]), row])).values()];
  const names = Object.keys(columns);
  const identifier = (name: string) => `"${name.replaceAll('"', '""')}"`;
  const definition = [`${identifier(key)} text`, ...names.map((name) => `${identifier(name)} ${columns[name]}`)].join(', ');
  await trx.raw(
    `UPDATE ${identifier(table)} SET ${names.map((name) => `${identifier(name)} = r.${identifier(name)}`).join(', ')}
       FROM jsonb_to_recordset(?::jsonb) AS r(${definition})
      WHERE ${identifier(table)}.${identifier(key)} = r.${identifier(key)}
        AND ${identifier(table)}.${identifier(key)} = ANY(?::text[])`,
    [JSON.stringify(latest), latest.map((row) => String(row[key]))],
  );
}
