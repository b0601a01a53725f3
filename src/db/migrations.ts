import type { Knex } from 'knex';
import { migrateUnderLock } from './database.js';

/**
 * The schemas a factlog database holds (the event store's tables, the read models, the jobs
 * table) each migrate as a list of steps, and one pair of functions runs every list: which steps
 * a database still lacks (`pendingMigrations`, read-only, what the commands that must not migrate
 * ask) and applying them (`applyMigrations`, what `serve` and `migrate` do). A step knows by
 * itself whether the database holds it: the read models' steps are recorded in
 * `schema_migrations`; the event store's and the jobs' are idempotent DDL, and each looks in the
 * catalogue for what it makes (a table, an index, a function's body, a column setting).
 */
export interface MigrationStep {
  /** Its name in messages: a read-model migration's id, or what the step makes. */
  id: string;
  /** Whether the database holds this step's work already; reads only. */
  applied(knex: Knex): Promise<boolean>;
  /** Does the work; runs in a transaction under the schema's advisory lock. */
  up(trx: Knex.Transaction): Promise<void>;
}

export interface Migrator {
  /** The schema's name for an operator: `event store`, `read models`, `jobs`. */
  schema: string;
  /** The advisory lock that serialises its migration across nodes (migrateUnderLock). */
  lockName: string;
  steps: readonly MigrationStep[];
}

/** The ids of the steps of `migrator` that the database does not hold yet, in order. Reads only. */
export async function pendingMigrations(knex: Knex, migrator: Migrator): Promise<string[]> {
  const pending: string[] = [];
  for (const step of migrator.steps) if (!(await step.applied(knex))) pending.push(step.id);
  return pending;
}

/**
 * Applies the steps the database lacks, one transaction each under the schema's lock (another
 * node may be migrating: it waits, then finds the step applied); returns the ids applied here.
 * A step found applied without the lock is passed over: a start on an up-to-date database (every
 * start but an upgrade's) takes no lock and opens no transaction.
 */
export async function applyMigrations(knex: Knex, migrator: Migrator): Promise<string[]> {
  const applied: string[] = [];
  for (const step of migrator.steps) {
    if (await step.applied(knex)) continue;
    await migrateUnderLock(knex, migrator.lockName, async (trx) => {
      if (await step.applied(trx)) return;
      await step.up(trx);
      applied.push(step.id);
    });
  }
  return applied;
}

/** A schema's pending (or applied) migration ids. */
export interface SchemaMigrations {
  schema: string;
  ids: string[];
}

/** `read models: 019_…, 020_…; jobs: job_count_deltas`: each schema that has any. */
export function describeMigrations(migrations: readonly SchemaMigrations[]): string {
  return migrations
    .filter((schema) => schema.ids.length > 0)
    .map((schema) => `${schema.schema}: ${schema.ids.join(', ')}`)
    .join('; ');
}

/**
 * A command that does not migrate met a database older than this factlog: it stops before
 * writing anything. Migrating is one deliberate step, after a backup (docs/operations.md,
 * "Upgrading"): an older factlog cannot use the database afterwards.
 */
export class PendingMigrationsError extends Error {
  constructor(readonly pending: readonly SchemaMigrations[]) {
    super(
      `the database is older than this factlog and needs migrations (${describeMigrations(pending)}); this command does not migrate and wrote nothing: ` +
        'back the database up (embedded: the whole data directory, with the service stopped), then run `factlog migrate` (or start the service, which migrates), and run the command again',
    );
    this.name = 'PendingMigrationsError';
  }
}

/**
 * The oid of the relation `?` names, the first on the search path, read from pg_class with the
 * statement's snapshot. Not to_regclass: it looks names up in the backend's catalog cache, whose
 * "no such relation" entry outlives another node's commit until the backend takes a lock on a
 * relation; a node that had asked before waiting for the migration lock then found no table the
 * node before it had made, ran the step again, and failed ("relation users already exists").
 */
const RELATION_OID = `(SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE c.relname = ? AND n.nspname = ANY(current_schemas(false))
   ORDER BY array_position(current_schemas(false), n.nspname::text) LIMIT 1)`;

/**
 * Whether `table` exists and none of `columns` keeps planner statistics: what
 * `withoutPlannerStatistics` (src/db/autovacuum.ts) leaves behind.
 */
export async function plannerStatisticsOff(knex: Knex, table: string, columns: readonly string[]): Promise<boolean> {
  const { rows } = await knex.raw<{ rows: Array<{ off: boolean }> }>(
    `SELECT t.oid IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = t.oid AND attname = ANY(?) AND attstattarget IS DISTINCT FROM 0
     ) AS off FROM (SELECT ${RELATION_OID} AS oid) AS t`,
    [[...columns], table],
  );
  return rows[0]?.off === true;
}

/** Whether every relation named exists (a table, an index), as the statement's snapshot sees the catalogue. */
export async function relationsExist(knex: Knex, ...names: string[]): Promise<boolean> {
  for (const name of names) {
    const { rows } = await knex.raw<{ rows: Array<{ oid: number | null }> }>(`SELECT ${RELATION_OID} AS oid`, [name]);
    if (rows[0]?.oid === null || rows[0]?.oid === undefined) return false;
  }
  return true;
}

/** Whether `table` (which exists) has the column `column`, as the statement's snapshot sees the catalogue. */
export async function columnExists(knex: Knex, table: string, column: string): Promise<boolean> {
  const { rows } = await knex.raw<{ rows: unknown[] }>(`SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = ${RELATION_OID} AND attname = ? AND NOT attisdropped`, [table, column]);
  return rows.length > 0;
}

/**
 * Whether the function `name` of the current schema exists with the body of `definition` (a
 * `CREATE OR REPLACE FUNCTION … AS $fn$…$fn$` statement): a release that changes a function's
 * body replaces it.
 */
export async function functionHasBody(knex: Knex, name: string, definition: string): Promise<boolean> {
  const body = /\$fn\$([\s\S]*)\$fn\$/.exec(definition)?.[1];
  if (body === undefined) throw new Error(`the definition of ${name} has no $fn$ body`);
  const { rows } = await knex.raw<{ rows: Array<{ prosrc: string }> }>(
    `SELECT p.prosrc FROM pg_proc p WHERE p.proname = ? AND p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())`,
    [name],
  );
  return rows.some((row) => row.prosrc === body);
}
