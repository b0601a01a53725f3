import type { Knex } from 'knex';
import { projection, each, type RecordedOf } from '../src/projection/types.js';
import { updateRows } from './batchWrites.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { finalSurvivorParams, finalSurvivorSql, followMerges } from './mergeChains.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;
type FactsEmbedded = Extract<SourceEvent, { type: 'FactsEmbedded' }>;
type Handled = FactsExtracted | FactsEmbedded | FactEvent | Extract<SourceEvent, { type: 'SourceDeleted' }>;

/** The final survivor of each fact id (itself when it never merged). */
function survivorsOf(trx: Knex.Transaction, factIds: readonly string[]): Promise<Map<string, string>> {
  return followMerges(trx, { table: 'fact_redirects', from: 'fact_id', to: 'survivor_id' }, factIds);
}

/**
 * A fact merged into `survivorId`, in one statement: the redirect is recorded, the fact marked
 * merged, and its source links move to its final survivor (a link the survivor already has is
 * kept), and a survivor that was unsourced is sourced again. The final survivor is followed from the fact's redirect as stored before this statement
 * (an earlier one wins over this, as the ignored insert leaves it) up to MAX_CHAIN_LENGTH steps,
 * as followMerges does; a chain that leads back to the fact moves nothing.
 */
async function applyFactMerged(trx: Knex.Transaction, factId: string, survivorId: string, repositoryId: string | null): Promise<void> {
  await trx.raw(
    `WITH RECURSIVE redirect AS (
       INSERT INTO fact_redirects (fact_id, survivor_id, repository_id) VALUES (?, ?, ?) ON CONFLICT (fact_id) DO NOTHING
     ), marked AS (
       UPDATE facts SET status = 'merged', merged_into = ? WHERE id = ?
     ), ${finalSurvivorSql('fact_redirects')}, moved AS (
       INSERT INTO fact_sources (fact_id, source_id, repository_id, chunk_index, source_text, sentence_index, extraction_order)
       SELECT target.id, s.source_id, s.repository_id, s.chunk_index, s.source_text, s.sentence_index, s.extraction_order
         FROM fact_sources s, target WHERE s.fact_id = ?
       ON CONFLICT (fact_id, source_id) DO NOTHING
       RETURNING fact_id
     ), sourced AS (
       UPDATE facts SET unsourced = false WHERE unsourced AND id IN (SELECT fact_id FROM moved) AND id <> ?
     )
     DELETE FROM fact_sources WHERE fact_id = ? AND EXISTS (SELECT 1 FROM target)`,
    [factId, survivorId, repositoryId, survivorId, factId, ...finalSurvivorParams(factId, survivorId), factId, factId, factId],
  );
}

/**
 * A run of FactsExtracted (of any sources) in three statements: the survivors of every fact,
 * the new facts, the source links. Merges are other events, so the survivors cannot change
 * within the run; rows go in log order, so of two inserts of one fact (or one link) the first
 * stays, as one event after another would leave it.
 */
async function applyFactsExtracted(
  trx: Knex.Transaction,
  events: ReadonlyArray<RecordedOf<FactsExtracted>>,
  later: LaterUpdates = { embeddings: new Map(), stabilizations: new Map() },
): Promise<void> {
  const withFacts = events.filter((event) => event.data.facts.length > 0);
  if (withFacts.length === 0) return;
  const survivors = await survivorsOf(trx, withFacts.flatMap((event) => event.data.facts.map((fact) => fact.fact_id)));
  const factRows: Array<Record<string, unknown>> = [];
  /** Identities (repository, content hash) already in factRows: an upsert may touch a row once; the first insert stays. */
  const identities = new Set<string>();
  const links = new Map<string, Record<string, unknown>>();
  for (const recorded of withFacts) {
    const { data } = recorded;
    const sourceId = parseStreamName(recorded.streamId).id;
    for (const [extractionOrder, fact] of data.facts.entries()) {
      // A fact that was merged (or merged and removed) keeps no row of its own: its source links to the survivor.
      const identity = `${recorded.repositoryId ?? ''} ${fact.content_hash}`;
      if (survivors.get(fact.fact_id) === fact.fact_id && !identities.has(identity)) {
        identities.add(identity);
        factRows.push({
          n: factRows.length,
          id: fact.fact_id,
          embedding_model: later.embeddings.get(fact.fact_id) ?? null,
          stable_since: later.stabilizations.get(fact.fact_id) ?? null,
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
        extraction_order: extractionOrder,
      });
    }
  }
  if (factRows.length > 0) {
    // embedding_model and stable_since are the run's later FactsEmbedded and FactStabilized of
    // the fact (null without one): a new row is written once with them. A fact stored before
    // gets them as the updates would have left it: the later model, stable only if it was new.
    await trx.raw(
      `INSERT INTO facts (id, repository_id, content, content_hash, fact_kind, status, model_id, promptset_hash, image_id, created_at,
                          embedding_model, stable_since)
       SELECT r.id, r.repository_id, r.content, r.content_hash, r.fact_kind, CASE WHEN r.stable_since IS NULL THEN 'new' ELSE 'stable' END,
              r.model_id, r.promptset_hash, r.image_id, r.created_at, r.embedding_model, r.stable_since
         FROM jsonb_to_recordset(?::jsonb) AS r(n int, id text, repository_id text, content text, content_hash text, fact_kind text,
                                               model_id text, promptset_hash text, image_id text, created_at timestamptz,
                                               embedding_model text, stable_since timestamptz)
        ORDER BY r.n
       ON CONFLICT (repository_id, content_hash) DO UPDATE
          SET embedding_model = COALESCE(excluded.embedding_model, facts.embedding_model),
              status = CASE WHEN facts.status = 'new' AND excluded.stable_since IS NOT NULL THEN 'stable' ELSE facts.status END,
              stable_since = CASE WHEN facts.status = 'new' AND excluded.stable_since IS NOT NULL THEN excluded.stable_since ELSE facts.stable_since END
        WHERE excluded.embedding_model IS NOT NULL OR excluded.stable_since IS NOT NULL`,
      [JSON.stringify(factRows)],
    );
  }
  for (const row of factRows) {
    later.embeddings.delete(String(row.id));
    later.stabilizations.delete(String(row.id));
  }
  // A fact a deleted source left unsourced has a source again (the partial index finds the few).
  await trx.raw(
    `WITH linked AS (
       INSERT INTO fact_sources (fact_id, source_id, repository_id, chunk_index, source_text, sentence_index, extraction_order)
       SELECT r.fact_id, r.source_id, r.repository_id, r.chunk_index, r.source_text, r.sentence_index, r.extraction_order
         FROM jsonb_to_recordset(?::jsonb) AS r(fact_id text, source_id text, repository_id text, chunk_index int, source_text text, sentence_index int,
                                               extraction_order int)
       ON CONFLICT (fact_id, source_id) DO NOTHING
       RETURNING fact_id
     )
     UPDATE facts SET unsourced = false WHERE unsourced AND id IN (SELECT fact_id FROM linked)`,
    [JSON.stringify([...links.values()])],
  );
}

/** Per fact id, what a run's FactsEmbedded (the last model) and FactStabilized (the first time) set. */
interface LaterUpdates {
  embeddings: Map<string, string>;
  stabilizations: Map<string, string>;
}

async function applyEmbeddings(trx: Knex.Transaction, embeddings: ReadonlyMap<string, string>): Promise<void> {
  const rows = [...embeddings].map(([id, model]) => ({ id, embedding_model: model }));
  await updateRows(trx, 'facts', 'id', { embedding_model: 'text' }, rows);
}

/** Only a new fact becomes stable: a merge that came first wins. */
async function applyStabilizations(trx: Knex.Transaction, firstTimes: ReadonlyMap<string, string>): Promise<void> {
  if (firstTimes.size === 0) return;
  await trx.raw(
    `UPDATE facts SET status = 'stable', stable_since = r.stable_since
       FROM jsonb_to_recordset(?::jsonb) AS r(id text, stable_since timestamptz)
      WHERE facts.id = r.id AND facts.status = 'new' AND facts.id = ANY(?::text[])`,
    // The ids again as an array, for an index lookup (see updateRows).
    [JSON.stringify([...firstTimes].map(([id, stable_since]) => ({ id, stable_since }))), [...firstTimes.keys()]],
  );
}

function embeddingsOf(events: ReadonlyArray<RecordedOf<FactsEmbedded>>, into = new Map<string, string>()): Map<string, string> {
  // A fact embedded twice keeps the later model, as one update after another would.
  for (const event of events) for (const vector of event.data.vectors) into.set(vector.fact_id, event.data.model);
  return into;
}

function stabilizationsOf(events: ReadonlyArray<RecordedOf<Extract<FactEvent, { type: 'FactStabilized' }>>>, into = new Map<string, string>()): Map<string, string> {
  // A fact stabilized twice keeps the first time, as one update after another would.
  for (const event of events) {
    const factId = parseStreamName(event.streamId).id;
    if (!into.has(factId)) into.set(factId, event.occurredAt);
  }
  return into;
}

/**
 * A run of FactsExtracted, FactsEmbedded and FactStabilized, as the three handlers would leave
 * it one type after the other, with each new fact written once: its row is inserted with the
 * run's embedding and stabilization of it; only facts stored before are updated afterwards.
 */
async function applyFactsRun(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<Handled>>): Promise<void> {
  const extracted: Array<RecordedOf<FactsExtracted>> = [];
  const embedded: Array<RecordedOf<FactsEmbedded>> = [];
  const stabilized: Array<RecordedOf<Extract<FactEvent, { type: 'FactStabilized' }>>> = [];
  for (const event of events) {
    if (event.type === 'FactsExtracted') extracted.push(event);
    else if (event.type === 'FactsEmbedded') embedded.push(event);
    else if (event.type === 'FactStabilized') stabilized.push(event);
    else throw new Error(`facts: ${event.type} is not in the FactsExtracted group`);
  }
  const later: LaterUpdates = { embeddings: embeddingsOf(embedded), stabilizations: stabilizationsOf(stabilized) };
  await applyFactsExtracted(trx, extracted, later);
  // What is left concerns facts that this run did not insert (stored before, or merged).
  await applyEmbeddings(trx, later.embeddings);
  await applyStabilizations(trx, later.stabilizations);
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
  batchTogether: [{ types: ['FactsExtracted', 'FactsEmbedded', 'FactStabilized'], handler: applyFactsRun }],
  // A merge moves the fact's source links, which any source's extraction may be adding: applied
  // side by side, the extraction could read the fact's survivors before the merge commits and
  // write its link on the merged fact after the merge moved the others.
  exclusive: ['FactMergedInto'],
  handlers: {
    FactsExtracted: (trx, events) => applyFactsExtracted(trx, events),
    // One statement for the run.
    FactsEmbedded: (trx, events) => applyEmbeddings(trx, embeddingsOf(events)),
    // One statement for the run.
    FactStabilized: (trx, events) => applyStabilizations(trx, stabilizationsOf(events)),
    FactMergedInto: each((trx, event) => applyFactMerged(trx, parseStreamName(event.streamId).id, event.data.survivor_id, event.repositoryId)),
    FactRemoved: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      await trx.raw(`WITH gone AS (DELETE FROM facts WHERE id = ?) DELETE FROM fact_sources WHERE fact_id = ?`, [factId, factId]);
    }),
    // The fact's last source was deleted; extracted again later, FactsExtracted brings it back.
    FactRetracted: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      await trx('facts').where({ id: factId }).delete();
      await trx('fact_sources').where({ fact_id: factId }).delete();
    }),
    // A deleted source's links go; its facts that no other source has are unsourced, hidden from
    // every read at once, until cleanup_facts retracts them. The subquery sees the links as they
    // were before the statement's delete, so it leaves the deleted source's out itself.
    SourceDeleted: each(async (trx, event) => {
      const sourceId = parseStreamName(event.streamId).id;
      await trx.raw(
        `WITH gone AS (DELETE FROM fact_sources WHERE source_id = ? RETURNING fact_id)
         UPDATE facts SET unsourced = true
          WHERE id IN (SELECT fact_id FROM gone) AND status <> 'merged'
            AND NOT EXISTS (SELECT 1 FROM fact_sources s WHERE s.fact_id = facts.id AND s.source_id <> ?)`,
        [sourceId, sourceId],
      );
    }),
  },
});
