import type { Knex } from 'knex';
import type { RecordedEvent } from '../../eventstore/envelope.js';
import type { AppendedWrite } from '../../projection/types.js';

/** A projection to wait for: its name and the event types it handles (`Projection.eventTypes`). */
export interface AwaitedProjection {
  name: string;
  eventTypes: readonly string[];
  /**
   * The trigger's stream holds an earlier event this projection handles, which the job needs
   * applied (a source's FactsExtracted before its ConceptsExtracted). Fed from the bus, where a
   * projection that does not handle the trigger's type keeps no version of it, it is then waited
   * for until it has applied some event of the trigger's stream.
   */
  earlierOnTriggerStream?: boolean;
}

/** An event to wait for: a job's trigger, or a write the stage appended (RecordedEvent is one). */
export interface AwaitedEvent {
  globalPosition: number;
  streamId: string;
  streamVersion: number;
  type: string;
}

/** The last event of a write that `sharedCommandFrom` and its kin report. */
export function lastEventOf(write: AppendedWrite): AwaitedEvent {
  return { globalPosition: write.position, streamId: write.streamId, streamVersion: write.streamVersion, type: write.types.at(-1) ?? '' };
}

/**
 * Whether every projection of `projections` has applied `trigger`. Projections fed from the log
 * (embedded tier) keep one global position in `projection_checkpoints`, moved past every event
 * whatever its type; projections fed from the bus keep a version per stream in
 * `projection_stream_positions` (src/projection/busRunner.ts), of the events they handle only:
 * there a projection that does not handle the trigger's type cannot be waited for on the trigger
 * itself: it is not, unless it handles an earlier event of the trigger's stream
 * (`earlierOnTriggerStream`), which it must have applied.
 */
export async function readModelsApplied(knex: Knex, projections: readonly AwaitedProjection[], trigger: AwaitedEvent): Promise<boolean> {
  const global = await globalCheckpoints(knex, projections);
  const done = new Set([...global].filter(([, position]) => position >= trigger.globalPosition).map(([name]) => name));
  const behind = projections.filter((projection) => !done.has(projection.name));
  if (behind.length === 0) return true;
  if (!(await tableExists(knex, 'projection_stream_positions'))) return false;
  const behindNames = behind.map((projection) => projection.name);
  // Which of them the bus feeds (they keep stream positions; one index probe each), and where they are on the trigger's stream.
  const fed = (await knex.raw(
    `SELECT p.name FROM unnest(?::text[]) AS p(name) WHERE EXISTS (SELECT 1 FROM projection_stream_positions s WHERE s.projection = p.name)`,
    [behindNames],
  )) as { rows: Array<{ name: string }> };
  const busFed = new Set(fed.rows.map((row) => row.name));
  const here: Array<{ projection: string; stream_version: string | number }> = await knex('projection_stream_positions')
    .whereIn('projection', behindNames)
    .where({ stream_id: trigger.streamId })
    .select('projection', 'stream_version');
  return behind.every((projection) => {
    // Not bus-fed: its global position is behind.
    if (!busFed.has(projection.name)) return false;
    const row = here.find((candidate) => candidate.projection === projection.name);
    if (!projection.eventTypes.includes(trigger.type)) return projection.earlierOnTriggerStream !== true || row !== undefined;
    return row !== undefined && Number(row.stream_version) >= trigger.streamVersion;
  });
}

/**
 * The global position up to which every one of `projections` has applied the log (the least of
 * their checkpoints), or null when one of them keeps none (fed from the bus: versions per stream,
 * no global position to give).
 */
export async function appliedThrough(knex: Knex, projections: readonly AwaitedProjection[]): Promise<number | null> {
  const global = await globalCheckpoints(knex, projections);
  if (projections.length === 0 || projections.some((projection) => !global.has(projection.name))) return null;
  return Math.min(...global.values());
}

/** The log-fed projections' checkpoints (global positions) by name; a projection without one is absent. */
async function globalCheckpoints(knex: Knex, projections: readonly AwaitedProjection[]): Promise<Map<string, number>> {
  if (!(await tableExists(knex, 'projection_checkpoints'))) return new Map();
  const rows: Array<{ name: string; position: string | number }> = await knex('projection_checkpoints')
    .whereIn(
      'name',
      projections.map((projection) => projection.name),
    )
    .select('name', 'position');
  return new Map(rows.map((row) => [row.name, Number(row.position)]));
}

/**
 * Waits (polling every `pollMs`) until the projections applied the trigger, at most `timeoutMs`;
 * returns whether they did. A scheduled job has no trigger to wait for. Rejects when `signal`
 * aborts (the job's timeout or a shutdown).
 */
export async function awaitReadModels(
  knex: Knex,
  projections: readonly AwaitedProjection[],
  context: { trigger: RecordedEvent; scheduled: boolean; signal: AbortSignal },
  options: { timeoutMs: number; pollMs?: number },
): Promise<boolean> {
  if (context.scheduled) return true;
  return awaitApplied(knex, projections, context.trigger, context.signal, options);
}

/** awaitReadModels for any event, e.g. one the stage appended itself; an event without a position (0) counts as applied. */
export async function awaitApplied(
  knex: Knex,
  projections: readonly AwaitedProjection[],
  event: AwaitedEvent,
  signal: AbortSignal,
  options: { timeoutMs: number; pollMs?: number },
): Promise<boolean> {
  if (event.globalPosition <= 0) return true;
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    signal.throwIfAborted();
    if (await readModelsApplied(knex, projections, event)) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 100));
  }
}

async function tableExists(knex: Knex, table: string): Promise<boolean> {
  const result = (await knex.raw(`SELECT to_regclass(?) IS NOT NULL AS present`, [table])) as { rows: Array<{ present: boolean }> };
  return result.rows[0]?.present === true;
}
