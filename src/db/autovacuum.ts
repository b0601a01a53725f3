import type { Knex } from 'knex';
import { inBackground } from './priority.js';

/**
 * PGlite runs no autovacuum daemon: without one its tables are never analyzed (the planner
 * keeps the guesses it made for an empty table, and reads of many streams or of a grown jobs
 * table turn to sequential scans) and never vacuumed (updated rows such as jobs and checkpoints
 * leave dead tuples in the heap and its indexes). This does what the daemon would, with
 * PostgreSQL's default thresholds, from the same statistics (`pg_stat_user_tables`), on the one
 * connection at background priority.
 */
export interface AutovacuumThresholds {
  /** autovacuum_vacuum_threshold / _scale_factor: dead tuples before a VACUUM. */
  vacuumBase: number;
  vacuumScale: number;
  /** autovacuum_vacuum_insert_threshold / _scale_factor: inserts before a VACUUM (visibility map). */
  insertBase: number;
  insertScale: number;
  /** autovacuum_analyze_threshold / _scale_factor: changed rows before an ANALYZE. */
  analyzeBase: number;
  analyzeScale: number;
}

/**
 * A statement that turns off the planner statistics of a table's columns that no statement
 * filters, joins or sorts on, so an ANALYZE samples only what plans read: an ANALYZE holds an
 * embedded node's one connection while requests wait, and each column's statistics cost it
 * about as much as the sampling does. Changes the catalogue only when a column still has
 * statistics: an ALTER at every start would invalidate every connection's cached plans of the
 * table. Names are identifiers written in this codebase, never input.
 */
export function withoutPlannerStatistics(table: string, columns: readonly string[]): string {
  return `DO $stats$
  BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = '${table}'::regclass
                  AND attname IN (${columns.map((column) => `'${column}'`).join(', ')})
                  AND attstattarget IS DISTINCT FROM 0) THEN
      ALTER TABLE ${table} ${columns.map((column) => `ALTER COLUMN ${column} SET STATISTICS 0`).join(', ')};
    END IF;
  END
  $stats$`;
}

/** PostgreSQL's defaults for the settings above. */
const POSTGRES_AUTOVACUUM_DEFAULTS: Readonly<AutovacuumThresholds> = {
  vacuumBase: 50,
  vacuumScale: 0.2,
  insertBase: 1000,
  insertScale: 0.2,
  analyzeBase: 50,
  analyzeScale: 0.1,
};

/** A table's activity since its last VACUUM and ANALYZE, as `pg_stat_user_tables` counts it. */
export interface TableActivity {
  table: string;
  /** `pg_class.reltuples` (-1 for a table never analyzed or vacuumed: taken as 0). */
  estimatedRows: number;
  deadTuples: number;
  insertedSinceVacuum: number;
  modifiedSinceAnalyze: number;
}

export type Maintenance = 'VACUUM (ANALYZE)' | 'VACUUM' | 'ANALYZE';

/** What the autovacuum daemon would run on a table now, by its rules; null when nothing. */
export function maintenanceFor(activity: TableActivity, thresholds: AutovacuumThresholds = POSTGRES_AUTOVACUUM_DEFAULTS): Maintenance | null {
  const rows = Math.max(0, activity.estimatedRows);
  const vacuum =
    activity.deadTuples > thresholds.vacuumBase + thresholds.vacuumScale * rows ||
    activity.insertedSinceVacuum > thresholds.insertBase + thresholds.insertScale * rows;
  const analyze = activity.modifiedSinceAnalyze > thresholds.analyzeBase + thresholds.analyzeScale * rows;
  if (vacuum && analyze) return 'VACUUM (ANALYZE)';
  if (vacuum) return 'VACUUM';
  return analyze ? 'ANALYZE' : null;
}

/** Reads every user table's activity; the statistics are flushed first (one backend, no collector). */
export async function tableActivity(knex: Knex): Promise<TableActivity[]> {
  await knex.raw('SELECT pg_stat_force_next_flush()');
  const result = (await knex.raw(
    `SELECT format('%I.%I', s.schemaname, s.relname) AS "table", c.reltuples::float8 AS "estimatedRows",
            s.n_dead_tup::int8 AS "deadTuples", s.n_ins_since_vacuum::int8 AS "insertedSinceVacuum",
            s.n_mod_since_analyze::int8 AS "modifiedSinceAnalyze"
       FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
      ORDER BY s.schemaname, s.relname`,
  )) as { rows: Array<Record<keyof TableActivity, string | number>> };
  return result.rows.map((row) => ({
    table: String(row.table),
    estimatedRows: Number(row.estimatedRows),
    deadTuples: Number(row.deadTuples),
    insertedSinceVacuum: Number(row.insertedSinceVacuum),
    modifiedSinceAnalyze: Number(row.modifiedSinceAnalyze),
  }));
}

/**
 * One round: every table that needs it is vacuumed or analyzed. Returns what ran. A table that
 * needs both gets a VACUUM and then an ANALYZE, two statements rather than `VACUUM (ANALYZE)`:
 * nothing else runs on the connection during either, and the facts table's took up to 128 ms at
 * 600 pages while a search waited; between the two, waiting requests go first.
 */
export async function maintainTables(knex: Knex, thresholds: AutovacuumThresholds = POSTGRES_AUTOVACUUM_DEFAULTS): Promise<Array<{ table: string; maintenance: Maintenance }>> {
  const done: Array<{ table: string; maintenance: Maintenance }> = [];
  for (const activity of await tableActivity(knex)) {
    const maintenance = maintenanceFor(activity, thresholds);
    if (!maintenance) continue;
    // The name comes from the catalogue, quoted by format('%I.%I').
    for (const statement of maintenance === 'VACUUM (ANALYZE)' ? ['VACUUM', 'ANALYZE'] : [maintenance]) await knex.raw(`${statement} ${activity.table}`);
    done.push({ table: activity.table, maintenance });
  }
  return done;
}

export interface Autovacuum {
  /** Stops the rounds; resolves when a round in progress has ended. */
  stop(): Promise<void>;
}

/**
 * Runs `maintainTables` every `intervalMs` (a round after the previous one ends, so they never
 * overlap) as background work. A failed round (a table dropped meanwhile) is reported to
 * `onError` and the next one runs as usual.
 */
export function startAutovacuum(knex: Knex, options: { intervalMs: number; onError?: (error: unknown) => void }): Autovacuum {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = inBackground(() => maintainTables(knex))
        .then(
          () => undefined,
          (error: unknown) => options.onError?.(error),
        )
        .finally(() => {
          running = null;
          schedule();
        });
    }, options.intervalMs);
    // An embedded node's maintenance never keeps its process alive.
    timer.unref();
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
