import { v5 as uuidv5 } from 'uuid';
import { sourceDecider } from '../../domain/source/decider.js';
import { handleCommand, loadState } from '../../eventstore/commandHandler.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { AssetStore } from '../../storage/assets.js';
import type { FactExtractor } from '../../providers/llm/port.js';
import { decomposeDocument } from '../../providers/decomposition/decompose.js';
import { PermanentJobError, type JobContext, type Stage } from '../types.js';
import { recordingSourceFailure, sourceSubject, stageMetadata } from './common.js';

/** Namespace of fact ids: uuidv5(`<repository id>:<content_hash>`), so one fact text is one fact per repository. */
export const FACT_ID_NAMESPACE = '6f0f7a52-3c55-4c1e-9a43-0d0f6f3b1a11';

export function factIdFor(repositoryId: string, contentHash: string): string {
  return uuidv5(`${repositoryId}:${contentHash}`, FACT_ID_NAMESPACE);
}

export interface SourceDecompositionDeps {
  store: EventStore;
  assets: AssetStore;
  extractor: FactExtractor;
  chunking: { chunkSize: number; chunkOverlap: number };
  maxAttempts: number;
}

/**
 * source_decomposition: split the fetched text into atomic, self-contained facts with the chat
 * model and record them (with their content hashes and derived ids) in FactsExtracted.
 */
export function createSourceDecompositionStage(deps: SourceDecompositionDeps): Stage {
  return {
    kind: 'source_decomposition',
    triggers: ['SourceFetched', 'SourceRetryRequested'],
    subjectOf: sourceSubject,
    async run(context: JobContext) {
      const stream = streamName('source', context.job.subjectId);
      const metadata = stageMetadata(context);
      const { state } = await loadState(deps.store, stream, sourceDecider);
      if (state.status !== 'fetched' && state.status !== 'decomposing') return;
      const fetched = state.fetched;
      if (!fetched) throw new PermanentJobError('source has no fetched text');
      const repositoryId = context.trigger.repositoryId;
      if (!repositoryId) throw new PermanentJobError('source event has no repository');
      await handleCommand(
        deps.store,
        stream,
        sourceDecider,
        { type: 'StartDecomposition', modelId: deps.extractor.modelId },
        metadata,
        { retries: 0 },
      );
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'source_decomposition', maxAttempts: deps.maxAttempts }, async () => {
        const text = await deps.assets.getText(fetched.text_sha256);
        const result = await decomposeDocument({ text, title: fetched.title }, deps.extractor, deps.chunking, context.signal);
        await handleCommand(
          deps.store,
          stream,
          sourceDecider,
          {
            type: 'RecordFacts',
            modelId: result.modelId,
            facts: result.facts.map((fact) => ({
              fact_id: factIdFor(repositoryId, fact.contentHash),
              content: fact.content,
              content_hash: fact.contentHash,
              source_text: fact.sourceText,
              chunk_index: fact.chunkIndex,
            })),
          },
          metadata,
          { retries: 0 },
        );
      });
    },
  };
}
