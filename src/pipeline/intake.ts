import type { Knex } from 'knex';
import { parseStreamName, type RecordedEvent } from '../eventstore/envelope.js';
import type { Projection } from '../projection/types.js';
import { JobRepository, type EnqueueJobInput } from './jobs.js';
import type { Stage } from './types.js';

export interface JobIntakeOptions {
  /** Checkpoint name; default `job-intake`. */
  name?: string;
  /** Attempt budget written on new rows (the runtime rewrites it at claim with its own). */
  maxAttempts?: number;
  /**
   * Called once per transaction after it commits, with the kinds that received new jobs:
   * wire it to `StageRuntime.wake` so workers claim at once instead of at their next poll.
   * Never called for a transaction that rolls back.
   */
  afterCommit?: (kinds: readonly string[]) => void;
}

/** The id of a `<category>-` stream the event is on, else a non-empty string `data[field]`, else null. */
function streamOrDataId(event: RecordedEvent, category: string, field: string): string | null {
  const stream = parseStreamName(event.streamId);
  if (stream.category === category && stream.id !== '') return stream.id;
  const value = event.data[field];
  return typeof value === 'string' && value !== '' ? value : null;
}

/** The source a trigger concerns when its stage does not say: its `source-` stream, else `data.source_id`. */
export function sourceIdOf(event: RecordedEvent): string | null {
  return streamOrDataId(event, 'source', 'source_id');
}

/**
 * The embedded tier's intake (DESIGN.md, "Stage runtime"): a projection of the log that turns
 * each trigger event into a job row inside the projection's own transaction, so a job is
 * enqueued exactly once with the checkpoint that covers its trigger.
 *
 * `tables` is empty on purpose: jobs hold runtime state (attempts, leases, errors), so a
 * rebuild must not empty them. Rebuilding `job-intake` from position 0 replays every trigger,
 * and the unique key (kind, subject id, trigger event id) makes that re-enqueue only the jobs
 * that are missing; finished jobs do not run again.
 */
export function createJobIntakeProjection(stages: readonly Stage[], options: JobIntakeOptions = {}): Projection {
  const stagesByTrigger = new Map<string, Stage[]>();
  const kinds = new Set<string>();
  for (const stage of stages) {
    if (typeof stage.kind !== 'string' || stage.kind === '') throw new TypeError('every stage needs a kind');
    if (kinds.has(stage.kind)) throw new Error(`two stages share the kind ${stage.kind}`);
    kinds.add(stage.kind);
    for (const trigger of stage.triggers) {
      const list = stagesByTrigger.get(trigger) ?? [];
      list.push(stage);
      stagesByTrigger.set(trigger, list);
    }
  }
  // Kinds enqueued per open transaction, so afterCommit fires once per batch, not per event.
  const pendingWakes = new WeakMap<Knex.Transaction, Set<string>>();

  function noteEnqueued(trx: Knex.Transaction, kind: string): void {
    const afterCommit = options.afterCommit;
    if (!afterCommit) return;
    let pending = pendingWakes.get(trx);
    if (!pending) {
      const created = new Set<string>();
      pending = created;
      pendingWakes.set(trx, created);
      // executionPromise settles when the transaction commits or rolls back.
      trx.executionPromise.then(
        () => afterCommit([...created]),
        () => undefined, // rolled back: nothing was enqueued
      );
    }
    pending.add(kind);
  }

  /** The jobs the events trigger, inserted in one statement; kinds that got a new job are woken after commit. */
  async function enqueueFor(trx: Knex.Transaction, events: readonly RecordedEvent[]): Promise<void> {
    const inputs: EnqueueJobInput[] = [];
    for (const event of events) {
      for (const stage of stagesByTrigger.get(event.type) ?? []) {
        const subjectId = stage.subjectOf(event);
        if (subjectId === null) continue;
        inputs.push({
          kind: stage.kind,
          subjectId,
          triggerEventId: event.eventId,
          triggerPosition: event.globalPosition,
          repositoryId: event.repositoryId,
          correlationId: event.correlationId,
          sourceId: stage.sourceOf ? stage.sourceOf(event) : sourceIdOf(event),
          reportId: streamOrDataId(event, 'report', 'report_id'),
          maxAttempts: options.maxAttempts,
        });
      }
    }
    if (inputs.length === 0) return;
    const results = await new JobRepository(trx).enqueueMany(inputs);
    results.forEach(({ inserted }, index) => {
      if (inserted) noteEnqueued(trx, inputs[index].kind);
    });
  }

  return {
    name: options.name ?? 'job-intake',
    eventTypes: [...stagesByTrigger.keys()],
    tables: [],
    // Its jobs read the read models their triggers change: after those in a split batch.
    startsWork: true,
    apply: (trx, event) => enqueueFor(trx, [event]),
    // Job rows commute (their unique key makes each insert idempotent): a batch's jobs go in one statement.
    applyBatch: enqueueFor,
  };
}
