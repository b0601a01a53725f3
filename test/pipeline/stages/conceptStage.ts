import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import type { ChatModel, ConceptCandidate, ConceptExtractionInput } from '../../../src/providers/llm/port.js';
import { createDeduplicateFactsStage } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import type { StageFixture } from '../stageFixture.js';

/** A chat model whose concept answers the test scripts; it counts calls and can fail on cue. */
export function scriptedChat(answer: (input: ConceptExtractionInput, call: number) => ConceptCandidate[] | Error): ChatModel & { calls: ConceptExtractionInput[] } {
  const local = createLocalChatModel();
  const calls: ConceptExtractionInput[] = [];
  return {
    ...local,
    modelId: 'test/scripted-v1',
    calls,
    async extractConcepts(input, signal) {
      signal?.throwIfAborted();
      calls.push(input);
      const result = answer(input, calls.length);
      if (result instanceof Error) throw result;
      return result;
    },
  };
}

/** A processed source whose facts went through deduplication (no embedder); returns the SourceFactsDeduplicated trigger. */
export async function deduplicatedSource(fixture: StageFixture, repositoryId: string, contents: string[]) {
  const dedup = createDeduplicateFactsStage({
    store: fixture.store,
    knex: fixture.db.knex,
    search: fixture.search,
    embedderModelId: null,
    threshold: 0.94,
    catchupMaxAgeMs: 3_600_000,
  });
  const source = await fixture.addSource(repositoryId, contents);
  await dedup.run(fixture.contextFor(dedup, source.extracted));
  const trigger = await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated');
  await fixture.settle();
  return { ...source, trigger };
}

