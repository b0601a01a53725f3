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
    // A run of slice writes in three statements, leaving what applying them one by one would.
    SummarySliceWritten: async (trx, events) => {
      // concept_summaries: one row per slice, the last write's content; created_at is the
      // first write's (kept by the upsert when the row exists).
      const slices = new Map<string, Record<string, unknown>>();
      for (const event of events) {
        const { data } = event;
        const first = slices.get(data.slice_id);
        slices.set(data.slice_id, {
          id: data.slice_id,
          repository_id: event.repositoryId,
          concept_id: parseStreamName(event.streamId).id,
          slice_number: data.slice_number,
          is_open: data.is_open,
          status: data.is_open ? 'open' : 'frozen',
          content: data.content,
          fact_ids: JSON.stringify(data.fact_ids),
          fact_count: data.fact_ids.length,
          model_id: data.model_id,
          reason: data.reason,
          created_at: first?.created_at ?? event.occurredAt,
          updated_at: event.occurredAt,
        });
      }
      await trx('concept_summaries')
        .insert([...slices.values()])
        .onConflict('id')
        .merge(['is_open', 'status', 'content', 'fact_ids', 'fact_count', 'model_id', 'reason', 'updated_at']);
      // concept_summary_facts: one by one, a write deletes its slice's rows and then claims its
      // facts (a fact moved from a later slice to this one before that slice is rewritten keeps
      // this slice: the later delete is by slice number). Played here on the rows of the run; in
      // the table, the rows of every slice written go first, then each fact claimed and claimed
      // no more at the end of the run (a slice written again without it), and the facts claimed
      // at the end are upserted: a fact that moved from a slice the run did not write takes its
      // new slice number. (A delete of every claimed fact before the insert cost 10 ms a
      // statement at 1,000 pages and found nothing to delete but in such a move.)
      const touched = new Map<string, [string, number]>();
      const everClaimed = new Map<string, [string, string]>();
      const claims = new Map<string, { concept_id: string; fact_id: string; repository_id: string | null; slice_number: number }>();
      // The facts each slice claimed in the run (some may have moved on since: checked on delete).
      const claimedBy = new Map<string, string[]>();
      for (const event of events) {
        const conceptId = parseStreamName(event.streamId).id;
        const sliceNumber = event.data.slice_number;
        const slice = `${conceptId}:${sliceNumber}`;
        touched.set(slice, [conceptId, sliceNumber]);
        for (const key of claimedBy.get(slice) ?? []) if (claims.get(key)?.slice_number === sliceNumber) claims.delete(key);
        const keys = event.data.fact_ids.map((factId) => `${conceptId}:${factId}`);
        claimedBy.set(slice, keys);
        for (const [position, factId] of event.data.fact_ids.entries()) {
          everClaimed.set(keys[position], [conceptId, factId]);
          claims.set(keys[position], { concept_id: conceptId, fact_id: factId, repository_id: event.repositoryId, slice_number: sliceNumber });
        }
      }
      // Deletes joined to the pairs (the slice index, concept_id first): one statement with both
      // lists of pairs OR-ed together scanned the whole table, comparing each row with every pair
      // (about a second a run at 400 pages, holding the one connection meanwhile). A row whose
      // fact the run claims stays and is upserted below, and the upsert leaves a row that already
      // says what it would write as it is: rewriting a slice of a concept writes only what moved,
      // not the slice's every row twice (docs/performance.md, "Nineteenth round").
      const slicePairs = [...touched.values()];
      const claimed = [...claims.values()];
      await trx.raw(
        `DELETE FROM concept_summary_facts s USING unnest(?::text[], ?::int[]) AS t(concept_id, slice_number)
          WHERE s.concept_id = t.concept_id AND s.slice_number = t.slice_number
            AND NOT EXISTS (SELECT 1 FROM unnest(?::text[], ?::text[]) AS c(concept_id, fact_id)
                             WHERE c.concept_id = s.concept_id AND c.fact_id = s.fact_id)`,
        [slicePairs.map(([conceptId]) => conceptId), slicePairs.map(([, sliceNumber]) => sliceNumber), claimed.map((row) => row.concept_id), claimed.map((row) => row.fact_id)],
      );
      const dropped = [...everClaimed].filter(([key]) => !claims.has(key)).map(([, pair]) => pair);
      if (dropped.length > 0) {
        await trx.raw(
          `DELETE FROM concept_summary_facts s USING unnest(?::text[], ?::text[]) AS t(concept_id, fact_id)
            WHERE s.concept_id = t.concept_id AND s.fact_id = t.fact_id`,
          [dropped.map(([conceptId]) => conceptId), dropped.map(([, factId]) => factId)],
        );
      }
      if (claimed.length > 0) {
        await trx.raw(
          `INSERT INTO concept_summary_facts AS s (concept_id, fact_id, repository_id, slice_number)
           SELECT r.concept_id, r.fact_id, r.repository_id, r.slice_number
             FROM jsonb_to_recordset(?::jsonb) AS r(concept_id text, fact_id text, repository_id text, slice_number int)
           ON CONFLICT (concept_id, fact_id) DO UPDATE SET slice_number = excluded.slice_number, repository_id = excluded.repository_id
            WHERE s.slice_number IS DISTINCT FROM excluded.slice_number OR s.repository_id IS DISTINCT FROM excluded.repository_id`,
          [JSON.stringify(claimed)],
        );
      }
    },
    SummarySliceRemoved: each(async (trx, event) => {
      const conceptId = parseStreamName(event.streamId).id;
      await trx('concept_summaries').where({ id: event.data.slice_id }).delete();
      await trx('concept_summary_facts').where({ concept_id: conceptId, slice_number: event.data.slice_number }).delete();
    }),
    // A run of syntheses in one upsert: per concept the last, created_at the first's.
    ConceptSynthesized: async (trx, events) => {
      const rows = new Map<string, Record<string, unknown>>();
      for (const event of events) {
        const conceptId = parseStreamName(event.streamId).id;
        const { data } = event;
        rows.set(conceptId, {
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
          created_at: rows.get(conceptId)?.created_at ?? event.occurredAt,
          updated_at: event.occurredAt,
        });
      }
      const changed = ['id', 'repository_id', 'content', 'fact_ids', 'slice_ids', 'related_concept_ids', 'related_synthesis_ids', 'image_fact_ids', 'model_id', 'inputs_hash', 'reason', 'updated_at'];
      await trx('concept_syntheses').insert([...rows.values()]).onConflict('concept_id').merge(changed);
    },
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
