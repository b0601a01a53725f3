import { factDecider } from '../../domain/fact/decider.js';
import { handleCommand, loadState } from '../../eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { factSubject, stageMetadata } from './common.js';

export interface CleanupFactsDeps {
  store: EventStore;
}

/**
 * cleanup_facts: a fact merged into a survivor is removed (FactRemoved); the read models drop
 * its row, its sources and concept links having moved to the survivor with the merge. Only
 * the fact's stream remains, for audit.
 */
export function createCleanupFactsStage(deps: CleanupFactsDeps): Stage {
  return {
    kind: 'cleanup_facts',
    triggers: ['FactMergedInto'],
    subjectOf: factSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    // The merge names the source whose deduplication made it (null for catch-up merges).
    sourceOf: (event: RecordedEvent) => (typeof event.data.source_id === 'string' && event.data.source_id !== '' ? event.data.source_id : null),
    async run(context: JobContext) {
      const stream = streamName('fact', context.job.subjectId);
      const { state } = await loadState(deps.store, stream, factDecider);
      // Removed already (a twin, or a rerun), or never merged: nothing to clean up.
      if (state.status !== 'merged') return;
      await handleCommand(deps.store, stream, factDecider, { type: 'RemoveFact' }, stageMetadata(context), { retries: 0 });
    },
  };
}

/** The registry's entry. */
export const cleanupFactsStage: StageDefinition = {
  kind: 'cleanup_facts',
  enabled: () => true,
  create: ({ store }) => createCleanupFactsStage({ store }),
};
