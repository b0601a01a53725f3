import type { Projection } from '../src/projection/types.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/**
 * Read models `facts` and `fact_sources`. A fact's id is derived from (repository,
 * content_hash), so the same fact from two sources is one row with two fact_sources links.
 */
export const factsProjection: Projection = {
  name: 'facts',
  eventTypes: ['FactsExtracted'],
  tables: ['facts', 'fact_sources'],
  async apply(trx, recorded) {
    const event = recorded as unknown as Extract<SourceEvent, { type: 'FactsExtracted' }> & typeof recorded;
    if (event.type !== 'FactsExtracted' || event.data.facts.length === 0) return;
    const sourceId = parseStreamName(recorded.streamId).id;
    await trx('facts')
      .insert(
        event.data.facts.map((fact) => ({
          id: fact.fact_id,
          repository_id: recorded.repositoryId,
          content: fact.content,
          content_hash: fact.content_hash,
          model_id: event.data.model_id,
          created_at: recorded.occurredAt,
        })),
      )
      .onConflict(['repository_id', 'content_hash'])
      .ignore();
    await trx('fact_sources')
      .insert(
        event.data.facts.map((fact) => ({
          fact_id: fact.fact_id,
          source_id: sourceId,
          repository_id: recorded.repositoryId,
          chunk_index: fact.chunk_index,
          source_text: fact.source_text,
        })),
      )
      .onConflict(['fact_id', 'source_id'])
      .ignore();
  },
};
