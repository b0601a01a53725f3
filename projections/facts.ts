import type { Knex } from 'knex';
import { projection, each, type RecordedOf } from '../src/projection/types.js';
import { updateRows } from './batchWrites.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { followMerges } from './mergeChains.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;
type FactsEmbedded = Extract<SourceEvent, { type: 'FactsEmbedded' }>;
type Handled = FactsExtracted | FactsEmbedded | FactEvent | Extract<SourceEvent, { type: 'SourceDeleted' }>;

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

/**
 * A run of FactsExtracted (of any sources) in three statements: the survivors of every fact,
 * the new facts, the source links. Merges are other events, so the survivors cannot change
 * within the run; rows go in log order, so of two inserts of one fact (or one link) the first
 * stays, as one event after another would leave it.
 */
async function applyFactsExtracted(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<FactsExtracted>>): Promise<void> {
  const withFacts = events.filter((event) => event.data.facts.length > 0);
  if (withFacts.length === 0) return;
  const survivors = await survivorsOf(trx, withFacts.flatMap((event) => event.data.facts.map((fact) => fact.fact_id)));
  const factRows: Array<Record<string, unknown>> = [];
  const links = new Map<string, Record<string, unknown>>();
  for (const recorded of withFacts) {
    const { data } = recorded;
    const sourceId = parseStreamName(recorded.streamId).id;
    for (const fact of data.facts) {
      // A fact that was merged (or merged and removed) keeps no row of its own: its source links to the survivor.
      if (survivors.get(fact.fact_id) === fact.fact_id) {
        factRows.push({
          n: factRows.length,
          id: fact.fact_id,
          repository_id: recorded.repositoryId,
          content: fact.content,
          content_hash: fact.content_hash,
          fact_kind: fact.fact_kind ?? 'text',
          model_id: data.model_id,
          promptset_hash: data.promptset_hash ?? '',
          image_id: fact.image_id ?? null,
          created_at: recorded.occurredAt,
        });
      }
      // One link per (fact, source): with two facts of the source merged into one survivor, the first wins.
      const factId = survivors.get(fact.fact_id) ?? fact.fact_id;
      const key = `${factId} ${sourceId}`;
      if (links.has(key)) continue;
      links.set(key, {
        fact_id: factId,
        source_id: sourceId,
        repository_id: recorded.repositoryId,
        chunk_index: fact.chunk_index,
        source_text: fact.source_text,
        sentence_index: fact.sentence_index ?? -1,
      });
    }
  }
  if (factRows.length > 0) {
    await trx.raw(
      `INSERT INTO facts (id, repository_id, content, content_hash, fact_kind, status, model_id, promptset_hash, image_id, created_at)
       SELECT r.id, r.repository_id, r.content, r.content_hash, r.fact_kind, 'new', r.model_id, r.promptset_hash, r.image_id, r.created_at
         FROM jsonb_to_recordset(?::jsonb) AS r(n int, id text, repository_id text, content text, content_hash text, fact_kind text,
                                               model_id text, promptset_hash text, image_id text, created_at timestamptz)
        ORDER BY r.n
       ON CONFLICT (repository_id, content_hash) DO NOTHING`,
      [JSON.stringify(factRows)],
    );
  }
  await trx.raw(
    `INSERT INTO fact_sources (fact_id, source_id, repository_id, chunk_index, source_text, sentence_index)
     SELECT r.fact_id, r.source_id, r.repository_id, r.chunk_index, r.source_text, r.sentence_index
       FROM jsonb_to_recordset(?::jsonb) AS r(fact_id text, source_id text, repository_id text, chunk_index int, source_text text, sentence_index int)
     ON CONFLICT (fact_id, source_id) DO NOTHING`,
    [JSON.stringify([...links.values()])],
  );
}

/**
 * Read models `facts` and `fact_sources` (docs/pipeline.md, "Read models"). A fact's id is
 * derived from (repository, content_hash), so the same fact from two sources is one row with
 * two fact_sources links. Facts start `new`; deduplication makes them `stable` or `merged`; a
 * merged fact's source links move to its survivor and cleanup then deletes its row.
 * `fact_redirects` remembers every merge so later links follow it. Concept links of merged
 * facts are the concepts projection's (projections/concepts.ts).
 */
export const factsProjection = projection<Handled>({
  name: 'facts',
  tables: ['facts', 'fact_sources', 'fact_redirects'],
  // A source's facts are extracted, then embedded; each fact is stabilized after it was extracted
  // (on its own stream). Inserts only add rows and the updates touch rows that exist by then, so a
  // run of these three types may insert all, then embed all, then stabilize all: long runs,
  // three statements each, instead of a few statements per source. Merges and removals end a run.
  batchTogether: [['FactsExtracted', 'FactsEmbedded', 'FactStabilized']],
  handlers: {
    FactsExtracted: applyFactsExtracted,
    // One statement for the run; a fact embedded twice keeps the later model, as one update after another would.
    async FactsEmbedded(trx, events) {
      const rows = events.flatMap((event) => event.data.vectors.map((vector) => ({ id: vector.fact_id, embedding_model: event.data.model })));
      await updateRows(trx, 'facts', 'id', { embedding_model: 'text' }, rows);
    },
    // Only a new fact becomes stable: a merge that came first wins. One statement for the run;
    // a fact stabilized twice keeps the first time, as one update after another would.
    async FactStabilized(trx, events) {
      const firstTimes = new Map<string, string>();
      for (const event of events) {
        const factId = parseStreamName(event.streamId).id;
        if (!firstTimes.has(factId)) firstTimes.set(factId, event.occurredAt);
      }
      await trx.raw(
        `UPDATE facts SET status = 'stable', stable_since = r.stable_since
           FROM jsonb_to_recordset(?::jsonb) AS r(id text, stable_since timestamptz)
          WHERE facts.id = r.id AND facts.status = 'new' AND facts.id = ANY(?::text[])`,
        // The ids again as an array, for an index lookup (see updateRows).
        [JSON.stringify([...firstTimes].map(([id, stable_since]) => ({ id, stable_since }))), [...firstTimes.keys()]],
      );
    },
    FactMergedInto: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      await trx('fact_redirects')
        .insert({ fact_id: factId, survivor_id: event.data.survivor_id, repository_id: event.repositoryId })
        .onConflict('fact_id')
        .ignore();
      await trx('facts').where({ id: factId }).update({ status: 'merged', merged_into: event.data.survivor_id });
      const survivor = (await survivorsOf(trx, [factId])).get(factId) ?? event.data.survivor_id;
      if (survivor !== factId) await moveFactSources(trx, factId, survivor);
    }),
    FactRemoved: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      await trx('facts').where({ id: factId }).delete();
      await trx('fact_sources').where({ fact_id: factId }).delete();
    }),
    // The fact's last source was deleted; extracted again later, FactsExtracted brings it back.
    FactRetracted: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      await trx('facts').where({ id: factId }).delete();
      await trx('fact_sources').where({ fact_id: factId }).delete();
    }),
    // A deleted source's links go; its facts that no other source has are retracted by cleanup_facts.
    SourceDeleted: each(async (trx, event) => {
      await trx('fact_sources').where({ source_id: parseStreamName(event.streamId).id }).delete();
    }),
  },
});
