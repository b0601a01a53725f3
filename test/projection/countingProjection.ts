import type { Knex } from 'knex';
import type { Database } from '../../src/db/database.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { Projection } from '../../src/projection/types.js';

// The runner tests' projection: counts ThingHappened events per name in `<name>_rows`.

/** Counts ThingHappened events per name; a double-applied event would show in `count`. */
export function countingProjection(
  name: string,
  options: { failOn?: () => string | null; beforeApply?: (event: RecordedEvent) => Promise<void> } = {},
): Projection {
  const table = `${name}_rows`;
  return {
    name,
    eventTypes: ['ThingHappened'],
    tables: [table],
    async apply(trx: Knex.Transaction, event: RecordedEvent) {
      await options.beforeApply?.(event);
      if (event.data.name === options.failOn?.()) throw new Error(`cannot project ${String(event.data.name)}`);
      await trx.raw(
        `INSERT INTO ?? (name, count, last_position) VALUES (?, 1, ?)
         ON CONFLICT (name) DO UPDATE SET count = ??.count + 1, last_position = excluded.last_position`,
        [table, String(event.data.name), event.globalPosition, table],
      );
    },
  };
}

export async function createRowsTable(db: Database, projectionName: string): Promise<void> {
  await db.knex.raw(
    `CREATE TABLE IF NOT EXISTS ?? (name text PRIMARY KEY, count integer NOT NULL, last_position bigint NOT NULL)`,
    [`${projectionName}_rows`],
  );
}

export async function rows(db: Database, projectionName: string): Promise<Array<{ name: string; count: number; last_position: number }>> {
  const result = (await db.knex(`${projectionName}_rows`).select('*').orderBy('name')) as Array<{
    name: string;
    count: number;
    last_position: string | number;
  }>;
  return result.map((row) => ({ name: row.name, count: Number(row.count), last_position: Number(row.last_position) }));
}

export async function checkpoint(db: Database, name: string): Promise<number> {
  const row = (await db.knex('projection_checkpoints').where({ name }).first()) as { position: string | number } | undefined;
  return Number(row?.position ?? -1);
}
