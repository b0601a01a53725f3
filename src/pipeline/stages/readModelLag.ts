import type { Knex } from 'knex';
import type { RecordedEvent } from '../../eventstore/envelope.js';

/**
 * The read model is behind the trigger: the stage would decide from a state that does not hold
 * the trigger yet. Transient: the runtime retries with backoff, by when the projection caught up.
 */
export class ReadModelBehindError extends Error {
  override readonly name = 'ReadModelBehindError';
}

/**
 * Whether every projection of `projections` has applied `trigger`. Projections fed from the log
 * (embedded tier) keep one global position in `projection_checkpoints`; projections fed from the
 * bus keep a version per stream in `projection_stream_positions` (src/projection/busRunner.ts).
 * Either one saying so is enough.
 */
export async function readModelsApplied(knex: Knex, projections: readonly string[], trigger: RecordedEvent): Promise<boolean> {
  const global: Array<{ name: string; position: string | number }> = (await tableExists(knex, 'projection_checkpoints'))
    ? await knex('projection_checkpoints').whereIn('name', [...projections]).select('name', 'position')
    : [];
  const done = new Set(global.filter((row) => Number(row.position) >= trigger.globalPosition).map((row) => row.name));
  const behind = projections.filter((name) => !done.has(name));
  if (behind.length === 0) return true;
  if (!(await tableExists(knex, 'projection_stream_positions'))) return false;
  const perStream: Array<{ projection: string }> = await knex('projection_stream_positions')
    .whereIn('projection', behind)
    .where({ stream_id: trigger.streamId })
    .where('stream_version', '>=', trigger.streamVersion)
    .select('projection');
  return behind.every((name) => perStream.some((row) => row.projection === name));
}

/** Throws ReadModelBehindError unless the projections applied the trigger (a scheduled job has none to wait for). */
export async function requireReadModels(knex: Knex, projections: readonly string[], trigger: RecordedEvent, scheduled: boolean): Promise<void> {
  if (scheduled || trigger.globalPosition <= 0) return;
  if (await readModelsApplied(knex, projections, trigger)) return;
  throw new ReadModelBehindError(`the read models ${projections.join(', ')} have not applied ${trigger.type} at position ${trigger.globalPosition} yet`);
}

async function tableExists(knex: Knex, table: string): Promise<boolean> {
  const result = (await knex.raw(`SELECT to_regclass(?) IS NOT NULL AS present`, [table])) as { rows: Array<{ present: boolean }> };
  return result.rows[0]?.present === true;
}
