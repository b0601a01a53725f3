import { v5 as uuidv5 } from 'uuid';
import { sourceDecider, type ExtractedFactInput } from '../../domain/source/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { AssetStore } from '../../storage/assets.js';
import type { ChatModel } from '../../providers/llm/port.js';
import type { Promptset } from '../../providers/llm/promptsets.js';
import { decomposeDocument } from '../../providers/decomposition/decompose.js';
import { extractSourceImageFacts } from '../../providers/decomposition/imageFacts.js';
import { PermanentJobError, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { commandFrom, failSourceOfDeadJob, loadStream, recordingSourceFailure, requireRepositoryId, sourceSubject, stageMetadata } from './common.js';
import { promptsetLookup } from './repositorySettings.js';

/** Namespace of fact ids: uuidv5(`<repository id>:<content_hash>`), so one fact text is one fact per repository. */
const FACT_ID_NAMESPACE = '6f0f7a52-3c55-4c1e-9a43-0d0f6f3b1a11';

export function factIdFor(repositoryId: string, contentHash: string): string {
  return uuidv5(`${repositoryId}:${contentHash}`, FACT_ID_NAMESPACE);
}

export interface SourceDecompositionDeps {
  store: EventStore;
  assets: AssetStore;
  /** The chat model: extractFacts for text chunks, extractImageFacts for images. */
  chat: ChatModel;
  /** The repository's effective promptset; its hash is recorded as the facts' promptset_hash. */
  promptsetFor(repositoryId: string): Promise<Promptset>;
  /** `providers.decomposition.chunking` (2000 / 200). */
  chunking: { chunkSize: number; chunkOverlap: number };
  /** `providers.decomposition.concurrency`: chunks and images in flight at once (4 / 4). */
  concurrency: { fact: number; image: number };
  maxAttempts: number;
}

/**
 * source_decomposition: split the fetched text into atomic, self-contained facts with the chat
 * model (chunks in parallel, facts kept in text order), add the facts each stored image shows,
 * and record them all (content hashes, derived ids, provenance) in FactsExtracted with the
 * hash of the promptset used.
 */
export function createSourceDecompositionStage(deps: SourceDecompositionDeps): Stage {
  return {
    kind: 'source_decomposition',
    onDead: failSourceOfDeadJob(deps.store, 'source_decomposition'),
    triggers: ['SourceFetched', 'SourceRetryRequested'],
    subjectOf: sourceSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    async run(context: JobContext) {
      const stream = streamName('source', context.job.subjectId);
      const metadata = stageMetadata(context);
      const loaded = await loadStream(deps.store, stream, sourceDecider);
      const { state } = loaded;
      if ((state.status !== 'fetched' && state.status !== 'decomposing') || state.deleted) return;
      const fetched = state.fetched;
      if (!fetched) throw new PermanentJobError('source has no fetched text');
      const repositoryId = requireRepositoryId(context);
      const { after: started } = await commandFrom(
        deps.store,
        stream,
        sourceDecider,
        loaded,
        { type: 'StartDecomposition', modelId: deps.chat.modelId },
        metadata,
        { retries: 0 },
      );
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'source_decomposition', maxAttempts: deps.maxAttempts }, async () => {
        const promptset = await deps.promptsetFor(repositoryId);
        const text = await deps.assets.getText(fetched.text_sha256);
        const textFacts = await decomposeDocument({ text, title: fetched.title }, deps.chat, deps.chunking, context.signal, {
          concurrency: deps.concurrency.fact,
          promptset,
        });
        const images = fetched.images ?? [];
        const imageFacts =
          images.length === 0
            ? []
            : await extractSourceImageFacts({
                images,
                loadBytes: (sha256) => deps.assets.get(sha256),
                chat: deps.chat,
                sourceTitle: fetched.title,
                markdown: await deps.assets.getText(fetched.markdown_sha256).catch(() => null),
                promptset,
                concurrency: deps.concurrency.image,
                signal: context.signal,
              });
        context.signal.throwIfAborted();

        // One fact per content_hash: a text fact wins over an image fact saying the same.
        const seen = new Set<string>();
        const facts: ExtractedFactInput[] = [];
        for (const fact of textFacts.facts) {
          seen.add(fact.contentHash);
          facts.push({
            fact_id: factIdFor(repositoryId, fact.contentHash),
            content: fact.content,
            content_hash: fact.contentHash,
            source_text: fact.sourceText,
            chunk_index: fact.chunkIndex,
            fact_kind: 'text',
            image_id: null,
            sentence_index: fact.sentenceIndex,
          });
        }
        for (const fact of imageFacts) {
          if (seen.has(fact.contentHash)) continue;
          seen.add(fact.contentHash);
          facts.push({
            fact_id: factIdFor(repositoryId, fact.contentHash),
            content: fact.content,
            content_hash: fact.contentHash,
            source_text: fact.sourceText,
            // Image facts come from no chunk and no sentence.
            chunk_index: -1,
            fact_kind: 'image',
            image_id: fact.imageId,
            sentence_index: -1,
          });
        }
        await commandFrom(
          deps.store,
          stream,
          sourceDecider,
          started,
          { type: 'RecordFacts', modelId: deps.chat.modelId, promptsetHash: promptset.hash, facts },
          metadata,
          { retries: 0 },
        );
      });
    },
  };
}

/** The registry's entry: chunking and concurrency from `providers.decomposition`. */
export const sourceDecompositionStage: StageDefinition = {
  kind: 'source_decomposition',
  enabled: () => true,
  create: ({ config, store, assets, chat, knex }) => {
    const { chunking, concurrency } = config.providers.decomposition;
    return createSourceDecompositionStage({
      store,
      assets,
      chat,
      promptsetFor: promptsetLookup(knex),
      chunking: { chunkSize: chunking.chunk_size, chunkOverlap: chunking.chunk_overlap },
      concurrency: { fact: concurrency.fact, image: concurrency.image },
      maxAttempts: config.task.retry.max_attempts,
    });
  },
};
