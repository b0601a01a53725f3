import type { Knex } from 'knex';
import { factDecider, type FactCommand, type FactEvent, type FactState } from '../../domain/fact/decider.js';
import { sourceDecider } from '../../domain/source/decider.js';
import { handleCommand, loadState, loadStream } from '../../eventstore/commandHandler.js';
import { parseStreamName, streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { factSubject, sharedCommandsFrom, stageMetadata, StreamCache, type BatchCommand } from './common.js';

export interface CleanupFactsDeps {
  store: EventStore;
  /** The read models: which other sources still have a fact (`fact_sources`). */
  knex: Knex;
}

/** Why a deleted source's facts are retracted, as FactRetracted records it. */
const SOURCE_DELETED_REASON = 'source deleted';

/**
 * The subject of a SourceDeleted job is its stream name (`source-<id>`), which no fact id is:
 * the two kinds of work of this stage share one job kind without sharing subjects.
 */
function subjectOf(event: RecordedEvent): string | null {
  return event.type === 'SourceDeleted' ? event.streamId : factSubject(event);
}

/**
 * cleanup_facts removes what no longer belongs in the repository:
 * - a fact merged into a survivor is removed (FactRemoved); the read models drop its row, its
 *   sources and concept links having moved to the survivor with the merge;
 * - after SourceDeleted, every fact the source extracted (followed to its survivor) that no other
 *   source has is retracted (FactRetracted with the source and the reason); the read models drop
 *   it, its concept links and its vector, and derived knowledge that cited it is re-made.
 * Only the streams remain, for audit.
 */
export function createCleanupFactsStage(deps: CleanupFactsDeps): Stage {
  async function removeMerged(context: JobContext): Promise<void> {
    const stream = streamName('fact', context.job.subjectId);
    const { state } = await loadState(deps.store, stream, factDecider);
    // Removed already (a twin, or a rerun), or never merged: nothing to clean up.
    if (state.status !== 'merged') return;
    await handleCommand(deps.store, stream, factDecider, { type: 'RemoveFact' }, stageMetadata(context), { retries: 0 });
  }

  async function retractFactsOf(context: JobContext, sourceStream: string): Promise<void> {
    const sourceId = parseStreamName(sourceStream).id;
    const source = await loadStream(deps.store, sourceStream, sourceDecider);
    if (source.state.status === 'none' || !source.state.deleted) return;
    const extracted = new Set<string>();
    for (const event of source.events) {
      if (event.type !== 'FactsExtracted') continue;
      for (const fact of (event.data as { facts: Array<{ fact_id: string }> }).facts) extracted.add(fact.fact_id);
    }
    if (extracted.size === 0) return;
    // A merged fact's sources moved to its survivor: the survivor is the fact to look at.
    const factStreams = new StreamCache<FactState, FactEvent>(deps.store, 'fact', factDecider, (state) =>
      state.status === 'merged' || state.status === 'removed' ? state.survivorId : null,
    );
    const finals = await factStreams.finals([...extracted]);
    const candidates = [...new Set([...finals.values()].map((end) => end.id))].sort();
    // Facts another (not deleted) source has stay; the deleted source's own links are gone or going.
    const kept = new Set(
      (await deps.knex('fact_sources').whereIn('fact_id', candidates).whereNot('source_id', sourceId).distinct().pluck('fact_id')) as string[],
    );
    const commands: Array<BatchCommand<FactState, FactCommand>> = candidates
      .filter((factId) => !kept.has(factId))
      .map((factId) => ({
        streamId: streamName('fact', factId),
        loaded: factStreams.get(factId),
        command: { type: 'RetractFact', sourceId, reason: SOURCE_DELETED_REASON },
      }));
    if (commands.length > 0) await sharedCommandsFrom(deps.store, factDecider, commands, stageMetadata(context));
  }

  return {
    kind: 'cleanup_facts',
    triggers: ['FactMergedInto', 'SourceDeleted'],
    subjectOf,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    // A merge names the source whose deduplication made it (null for catch-up merges); a deletion its own source.
    sourceOf: (event: RecordedEvent) => {
      if (event.type === 'SourceDeleted') return parseStreamName(event.streamId).id;
      return typeof event.data.source_id === 'string' && event.data.source_id !== '' ? event.data.source_id : null;
    },
    async run(context: JobContext) {
      const subject = context.job.subjectId;
      if (subject.startsWith('source-')) await retractFactsOf(context, subject);
      else await removeMerged(context);
    },
  };
}

/** The registry's entry. */
export const cleanupFactsStage: StageDefinition = {
  kind: 'cleanup_facts',
  enabled: () => true,
  create: ({ store, knex }) => createCleanupFactsStage({ store, knex }),
};
