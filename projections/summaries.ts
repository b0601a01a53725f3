import { projection, each } from '../src/projection/types.js';
import type { ConceptEvent } from '../src/domain/concept/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

type Handled = Extract<ConceptEvent, { type: 'SummarySliceWritten' | 'SummarySliceRemoved' | 'ConceptSynthesized' | 'ConceptSynthesisRemoved' | 'ConceptMergedInto' }>;

/**
 * Read models `concept_summaries` (one row per slice; also the lexical index of the `summaries`
 * search collection), `concept_summary_facts` (which slice covers each fact) and
 * `concept_syntheses` (one row per concept). A concept merged into another keeps none of them:
 * the survivor's next summarize run covers the facts that moved to it.
 */
export const summariesProjection = projection<Handled>({
  name: 'summaries',
  tables: ['concept_summaries', 'concept_summary_facts', 'concept_syntheses'],
  handlers: {
    SummarySliceWritten: each(async (trx, event) => {
      const conceptId = parseStreamName(event.streamId).id;
      const { data } = event;
      await trx('concept_summaries')
        .insert({
          id: data.slice_id,
          repository_id: event.repositoryId,
          concept_id: conceptId,
          slice_number: data.slice_number,
          is_open: data.is_open,
          status: data.is_open ? 'open' : 'frozen',
          content: data.content,
          fact_ids: JSON.stringify(data.fact_ids),
          fact_count: data.fact_ids.length,
          model_id: data.model_id,
          reason: data.reason,
          created_at: event.occurredAt,
          updated_at: event.occurredAt,
        })
        .onConflict('id')
        .merge(['is_open', 'status', 'content', 'fact_ids', 'fact_count', 'model_id', 'reason', 'updated_at']);
      // A rewrite may move a fact from a later slice to this one before that slice is rewritten
      // in the same append: the row is claimed here (merge), and the later slice's delete by
      // its number leaves it alone.
      await trx('concept_summary_facts').where({ concept_id: conceptId, slice_number: data.slice_number }).delete();
      if (data.fact_ids.length > 0) {
        await trx('concept_summary_facts')
          .insert(data.fact_ids.map((factId) => ({ concept_id: conceptId, fact_id: factId, repository_id: event.repositoryId, slice_number: data.slice_number })))
          .onConflict(['concept_id', 'fact_id'])
          .merge(['slice_number']);
      }
    }),
    SummarySliceRemoved: each(async (trx, event) => {
      const conceptId = parseStreamName(event.streamId).id;
      await trx('concept_summaries').where({ id: event.data.slice_id }).delete();
      await trx('concept_summary_facts').where({ concept_id: conceptId, slice_number: event.data.slice_number }).delete();
    }),
    ConceptSynthesized: each(async (trx, event) => {
      const conceptId = parseStreamName(event.streamId).id;
      const { data } = event;
      const row = {
        concept_id: conceptId,
        id: data.synthesis_id,
        repository_id: event.repositoryId,
        content: data.content,
        fact_ids: JSON.stringify(data.fact_ids),
        slice_ids: JSON.stringify(data.slice_ids),
        related_concept_ids: JSON.stringify(data.related_concept_ids),
        related_synthesis_ids: JSON.stringify(data.related_synthesis_ids),
        image_fact_ids: JSON.stringify(data.image_fact_ids),
        model_id: data.model_id,
        inputs_hash: data.inputs_hash,
        reason: data.reason,
        created_at: event.occurredAt,
        updated_at: event.occurredAt,
      };
      const { created_at: _created, ...changes } = row;
      await trx('concept_syntheses').insert(row).onConflict('concept_id').merge(Object.keys(changes));
    }),
    ConceptSynthesisRemoved: each(async (trx, event) => {
      await trx('concept_syntheses').where({ concept_id: parseStreamName(event.streamId).id }).delete();
    }),
    ConceptMergedInto: each(async (trx, event) => {
      const conceptId = parseStreamName(event.streamId).id;
      await trx('concept_summaries').where({ concept_id: conceptId }).delete();
      await trx('concept_summary_facts').where({ concept_id: conceptId }).delete();
      await trx('concept_syntheses').where({ concept_id: conceptId }).delete();
    }),
  },
});
