import type { Knex } from 'knex';
import type { Projection } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { followMerges } from './mergeChains.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;
type FactsEmbedded = Extract<SourceEvent, { type: 'FactsEmbedded' }>;
type Handled = FactsExtracted | FactsEmbedded | FactEvent;

/** The final survivor of each fact id (itself when it never merged). */
function survivorsOf(trx: Knex.Transaction, factIds: readonly string[]): Promise<Map<string, string>> {
  return followMerges(trx, { table: 'fact_redirects', from: 'fact_id', to: 'survivor_id' }, factIds);
}

/** Moves the source links of `loserId` to `survivorId` (a link the survivor already has is kept). */
async function moveFactSources(trx: Knex.Transaction, loserId: string, survivorId: string): Promise<void> {
  await trx.raw(
    `INSERT INTO fact_sources (fact_id, source_id, repository_id, chunk_index, source_text, sentence_index)
     SELECT ?, source_id, repository_id, chunk_index, source_text, sentence_index FROM fact_sources WHERE fact_id = ?
     ON CONFLICT (fact_id, source_id) DO NOTHING`,
    [survivorId, loserId],
  );
  await trx('fact_sources').where({ fact_id: loserId }).delete();
}

async function applyFactsExtracted(trx: Knex.Transaction, recorded: RecordedEvent, data: FactsExtracted['data']): Promise<void> {
  if (data.facts.length === 0) return;
  const sourceId = parseStreamName(recorded.streamId).id;
  const survivors = await survivorsOf(trx, data.facts.map((fact) => fact.fact_id));
  // A fact that was merged (or merged and removed) keeps no row of its own: its source links to the survivor.
  const fresh = data.facts.filter((fact) => survivors.get(fact.fact_id) === fact.fact_id);
  if (fresh.length > 0) {
    await trx('facts')
      .insert(
        fresh.map((fact) => ({
          id: fact.fact_id,
          repository_id: recorded.repositoryId,
          content: fact.content,
          content_hash: fact.content_hash,
          fact_kind: fact.fact_kind ?? 'text',
          status: 'new',
          model_id: data.model_id,
          promptset_hash: data.promptset_hash ?? '',
          image_id: fact.image_id ?? null,
          created_at: recorded.occurredAt,
        })),
      )
      .onConflict(['repository_id', 'content_hash'])
      .ignore();
  }
  // One link per (fact, source): with two facts of the source merged into one survivor, the first wins.
  const links = new Map<string, Record<string, unknown>>();
  for (const fact of data.facts) {
    const factId = survivors.get(fact.fact_id) ?? fact.fact_id;
    if (links.has(factId)) continue;
    links.set(factId, {
      fact_id: factId,
      source_id: sourceId,
      repository_id: recorded.repositoryId,
      chunk_index: fact.chunk_index,
      source_text: fact.source_text,
      sentence_index: fact.sentence_index ?? -1,
    });
  }
  await trx('fact_sources').insert([...links.values()]).onConflict(['fact_id', 'source_id']).ignore();
}

/**
 * Read models `facts` and `fact_sources` (docs/pipeline.md, "Read models"). A fact's id is
 * derived from (repository, content_hash), so the same fact from two sources is one row with
 * two fact_sources links. Facts start `new`; deduplication makes them `stable` or `merged`; a
 * merged fact's source links move to its survivor and cleanup then deletes its row.
 * `fact_redirects` remembers every merge so later links follow it. Concept links of merged
 * facts are the concepts projection's (projections/concepts.ts).
 */
export const factsProjection: Projection = {
  name: 'facts',
  eventTypes: ['FactsExtracted', 'FactsEmbedded', 'FactStabilized', 'FactMergedInto', 'FactRemoved'],
  tables: ['facts', 'fact_sources', 'fact_redirects'],
  async apply(trx, recorded) {
    const event = recorded as unknown as Handled & RecordedEvent;
    switch (event.type) {
      case 'FactsExtracted':
        await applyFactsExtracted(trx, recorded, event.data);
        return;
      case 'FactsEmbedded': {
        const factIds = event.data.vectors.map((vector) => vector.fact_id);
        if (factIds.length > 0) await trx('facts').whereIn('id', factIds).update({ embedding_model: event.data.model });
        return;
      }
      case 'FactStabilized':
        // Only a new fact becomes stable: a merge that came first wins.
        await trx('facts').where({ id: parseStreamName(recorded.streamId).id, status: 'new' }).update({ status: 'stable', stable_since: recorded.occurredAt });
        return;
      case 'FactMergedInto': {
        const factId = parseStreamName(recorded.streamId).id;
        await trx('fact_redirects')
          .insert({ fact_id: factId, survivor_id: event.data.survivor_id, repository_id: recorded.repositoryId })
          .onConflict('fact_id')
          .ignore();
        await trx('facts').where({ id: factId }).update({ status: 'merged', merged_into: event.data.survivor_id });
        const survivor = (await survivorsOf(trx, [factId])).get(factId) ?? event.data.survivor_id;
        if (survivor !== factId) await moveFactSources(trx, factId, survivor);
        return;
      }
      case 'FactRemoved': {
        const factId = parseStreamName(recorded.streamId).id;
        await trx('facts').where({ id: factId }).delete();
        await trx('fact_sources').where({ fact_id: factId }).delete();
        return;
      }
    }
  },
};
