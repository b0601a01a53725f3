import type { Knex } from 'knex';
import { projection, each, type RecordedOf } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import { conceptName, conceptNameKey } from '../src/domain/concept/decider.js';
import type { ConceptIdentityEvent as ConceptEvent } from '../src/domain/concept/events.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { chunked } from '../src/util/chunked.js';
import { finalSurvivorParams, finalSurvivorSql, followMerges } from './mergeChains.js';

type Handled =
  | ConceptEvent
  | Extract<SourceEvent, { type: 'ConceptsExtracted' }>
  | Extract<FactEvent, { type: 'FactMergedInto' | 'FactRetracted' }>
  | Extract<RepositoryEvent, { type: 'ConceptRelationsRefreshed' }>;

/** The final survivor of each concept id (itself when it never merged). */
function conceptSurvivors(trx: Knex.Transaction, conceptIds: readonly string[]): Promise<Map<string, string>> {
  return followMerges(trx, { table: 'concepts', from: 'id', to: 'merged_into', where: { status: 'merged' } }, conceptIds);
}

/** The final survivor of each fact id, from this projection's own record of fact merges. */
function factSurvivors(trx: Knex.Transaction, factIds: readonly string[]): Promise<Map<string, string>> {
  return followMerges(trx, { table: 'fact_concept_redirects', from: 'fact_id', to: 'survivor_id' }, factIds);
}

/**
 * fact_count = the facts linked to the concept. Links of a merged fact move to its survivor when
 * it merges, so every linked fact is one that is not merged.
 */
async function recountFacts(trx: Knex.Transaction, conceptIds: Iterable<string>): Promise<void> {
  const ids = [...new Set(conceptIds)];
  if (ids.length === 0) return;
  await trx('concepts')
    .whereIn('id', ids)
    .update({ fact_count: trx.raw('(SELECT count(*) FROM fact_concepts WHERE fact_concepts.concept_id = concepts.id)') });
}

/**
 * alias_text = the aliases other than the canonical name, space-joined (feeds concepts.search;
 * migration 024 too). Compared by the keys conceptNameKey made (alias_lower, name_key), never by
 * SQL lower(), which depends on the database's ctype and does not compose.
 */
export async function refreshAliasText(trx: Knex, conceptIds: string | readonly string[]): Promise<void> {
  const ids = typeof conceptIds === 'string' ? [conceptIds] : [...conceptIds];
  if (ids.length === 0) return;
  await trx('concepts')
    .whereIn('id', ids)
    .update({
      alias_text: trx.raw(
        `COALESCE((SELECT string_agg(alias, ' ' ORDER BY alias_lower) FROM concept_aliases
           WHERE concept_aliases.concept_id = concepts.id AND alias_lower <> concepts.name_key), '')`,
      ),
    });
}

type AliasedConcept = { id: string; repositoryId: string; context: string; aliases: readonly string[] };
type AliasRow = { concept_id: string; repository_id: string; alias: string; alias_lower: string; context_lower: string };

/**
 * The alias rows of each concept: non-empty, the first spelling of each key, spelt and keyed as
 * the domain does now (conceptName, conceptNameKey), so a name an event recorded decomposed, before
 * names were composed, is found by either spelling (events stay as written; their rows do not).
 */
function aliasRows(concepts: readonly AliasedConcept[]): AliasRow[] {
  const rows = new Map<string, AliasRow>();
  for (const concept of concepts) {
    for (const raw of concept.aliases) {
      const alias = conceptName(raw);
      const aliasLower = conceptNameKey(alias);
      const key = `${concept.id} ${aliasLower}`;
      if (alias === '' || rows.has(key)) continue;
      rows.set(key, {
        concept_id: concept.id,
        repository_id: concept.repositoryId,
        alias,
        alias_lower: aliasLower,
        context_lower: concept.context.toLowerCase(),
      });
    }
  }
  return [...rows.values()];
}

/** Inserts the aliases of each concept (one statement for all); an alias a concept has already is kept as it is. */
async function insertAliases(trx: Knex.Transaction, concepts: readonly AliasedConcept[]): Promise<void> {
  const rows = aliasRows(concepts);
  if (rows.length === 0) return;
  await trx('concept_aliases').insert(rows).onConflict(['concept_id', 'alias_lower']).ignore();
}

/** Moves the fact links of `fromConcept` to `toConcept`; returns nothing, the caller recounts both. */
async function moveConceptLinks(trx: Knex.Transaction, fromConcept: string, toConcept: string): Promise<void> {
  await trx.raw(
    `INSERT INTO fact_concepts (fact_id, concept_id, repository_id, source_id)
     SELECT fact_id, ?, repository_id, source_id FROM fact_concepts WHERE concept_id = ?
     ON CONFLICT (fact_id, concept_id) DO NOTHING`,
    [toConcept, fromConcept],
  );
  await trx('fact_concepts').where({ concept_id: fromConcept }).delete();
}

/**
 * The concepts that share a fact with `conceptId`, other than `survivorId`: after a merge moves
 * the concept's links to the survivor, the survivor's pairs with these (and only these) change.
 */
async function relationPartners(trx: Knex.Transaction, repositoryId: string, conceptId: string, survivorId: string): Promise<string[]> {
  const result = (await trx.raw(
    `SELECT DISTINCT o.concept_id FROM fact_concepts l
       JOIN fact_concepts o ON o.fact_id = l.fact_id AND o.concept_id <> l.concept_id AND o.concept_id <> ?
      WHERE l.concept_id = ? AND l.repository_id = ? AND o.repository_id = ?`,
    [survivorId, conceptId, repositoryId, repositoryId],
  )) as { rows: Array<{ concept_id: string }> };
  return result.rows.map((row) => row.concept_id);
}

/** Relation rows one statement of applyRelations or recountRelations writes at most (the rows travel as one JSON parameter). */
const RELATION_ROWS_PER_STATEMENT = 1000;

/** A pair whose relation is counted again: `concept`'s links are the side the count scans; `at` is the row's updated_at if it changes. */
type RecountedPair = { concept: string; other: string; at: string };

/** Each of `concepts` paired with each of `others` but itself (its links scanned), changed at `at`. */
function pairsAmong(concepts: readonly string[], others: readonly string[], at: string): RecountedPair[] {
  return concepts.flatMap((concept) => others.filter((other) => other !== concept).map((other) => ({ concept, other, at })));
}

/** The key of an unordered pair, ordered byte-wise as relation rows are. */
const relationKey = (x: string, y: string): string => (x < y ? `${x}\u0000${y}` : `${y}\u0000${x}`);

/**
 * Counts again the relations of `pairs` (in `repositoryId`) from this projection's own
 * fact_concepts, as refresh_concept_relations counts them (every link is of a live fact: links
 * of merged facts moved to the survivor, those of retracted facts went), so the refresh then
 * finds these pairs unchanged: a pair that shares facts gets its row (updated only when its count
 * changed), one that shares none loses it. What changes which facts two concepts share calls it
 * with the pairs it touched (a concept's merge, a fact's merge or retraction), so relations follow
 * at once rather than at the next periodic refresh. Of two entries of one pair the last stays.
 */
async function recountRelations(trx: Knex.Transaction, repositoryId: string, pairs: readonly RecountedPair[]): Promise<void> {
  const distinct = [...new Map(pairs.filter((pair) => pair.concept !== pair.other).map((pair) => [relationKey(pair.concept, pair.other), pair])).values()];
  for (const rows of chunked(distinct, RELATION_ROWS_PER_STATEMENT)) {
    // Pairs are stored ordered byte-wise (a < b), as the refresh and applyRelations order them.
    await trx.raw(
      `WITH pairs AS (
         SELECT * FROM jsonb_to_recordset(?::jsonb) AS r(concept text, other text, at timestamptz)
       ), shared AS (
         SELECT s.concept_id AS concept, o.concept_id AS other, count(*)::integer AS n
           FROM fact_concepts s
           JOIN fact_concepts o ON o.fact_id = s.fact_id AND o.concept_id = ANY(?::text[]) AND o.repository_id = s.repository_id
           JOIN pairs ON pairs.concept = s.concept_id AND pairs.other = o.concept_id
          WHERE s.concept_id = ANY(?::text[]) AND s.repository_id = ?
          GROUP BY s.concept_id, o.concept_id
       ), counted AS (
         SELECT LEAST(pairs.concept COLLATE "C", pairs.other COLLATE "C") AS a, GREATEST(pairs.concept COLLATE "C", pairs.other COLLATE "C") AS b,
                COALESCE(shared.n, 0) AS n, pairs.at
           FROM pairs LEFT JOIN shared ON shared.concept = pairs.concept AND shared.other = pairs.other
       ), unrelated AS (
         DELETE FROM concept_relations USING counted
          WHERE counted.n = 0 AND concept_relations.repository_id = ? AND concept_relations.concept_a = counted.a AND concept_relations.concept_b = counted.b
       )
       INSERT INTO concept_relations (repository_id, concept_a, concept_b, shared_fact_count, updated_at)
       SELECT ?, a, b, n, at FROM counted WHERE n > 0
       ON CONFLICT (repository_id, concept_a, concept_b) DO UPDATE SET shared_fact_count = excluded.shared_fact_count, updated_at = excluded.updated_at
        WHERE concept_relations.shared_fact_count <> excluded.shared_fact_count`,
      [JSON.stringify(rows), [...new Set(rows.map((pair) => pair.other))], [...new Set(rows.map((pair) => pair.concept))], repositoryId, repositoryId, repositoryId],
    );
  }
}

/**
 * The relations a merge changes, so the survivor's relations include the merged concept's at
 * once: the merged concept's pairs go (it has no links left), and the survivor's pairs with the
 * merged concept's partners are counted again (recountRelations, scanning the survivor's links
 * once). Only those: the survivor's other pairs gained no shared fact.
 */
async function carryRelationsToSurvivor(
  trx: Knex.Transaction,
  merge: { repositoryId: string; conceptId: string; survivorId: string; partners: readonly string[]; at: string },
): Promise<void> {
  const { repositoryId, conceptId, survivorId, partners, at } = merge;
  await trx('concept_relations')
    .where({ repository_id: repositoryId })
    .where((pair) => pair.where({ concept_a: conceptId }).orWhere({ concept_b: conceptId }))
    .delete();
  await recountRelations(trx, repositoryId, pairsAmong([survivorId], partners, at));
}

async function applyConceptMerged(trx: Knex.Transaction, recorded: RecordedEvent<string, unknown>, conceptId: string, survivorId: string): Promise<void> {
  const loser = (await trx('concepts').where({ id: conceptId }).first('id', 'status', 'repository_id')) as
    | { id: string; status: string; repository_id: string }
    | undefined;
  if (!loser || loser.status === 'merged') return;
  await trx('concepts')
    .where({ id: conceptId })
    .update({ status: 'merged', merged_into: survivorId, fact_count: 0, updated_at: recorded.occurredAt });
  const finalSurvivor = (await conceptSurvivors(trx, [survivorId])).get(survivorId) ?? survivorId;
  if (finalSurvivor === conceptId) return; // a cycle: nothing sensible to move
  const survivor = (await trx('concepts').where({ id: finalSurvivor }).first('context', 'repository_id')) as
    | { context: string; repository_id: string }
    | undefined;
  // The loser's names (its canonical name included) now resolve to the survivor, in the survivor's context.
  const aliases = (await trx('concept_aliases').where({ concept_id: conceptId }).pluck('alias')) as string[];
  if (survivor) {
    await insertAliases(trx, [{ id: finalSurvivor, repositoryId: survivor.repository_id, context: survivor.context, aliases }]);
  }
  await trx('concept_aliases').where({ concept_id: conceptId }).delete();
  await refreshAliasText(trx, conceptId);
  await refreshAliasText(trx, finalSurvivor);
  const partners = await relationPartners(trx, loser.repository_id, conceptId, finalSurvivor);
  await moveConceptLinks(trx, conceptId, finalSurvivor);
  await recountFacts(trx, [conceptId, finalSurvivor]);
  await carryRelationsToSurvivor(trx, { repositoryId: loser.repository_id, conceptId, survivorId: finalSurvivor, partners, at: recorded.occurredAt });
  await trx('concepts').where({ id: finalSurvivor }).update({ updated_at: recorded.occurredAt });
}

type FactConceptLink = { fact_id: string; concept_id: string; repository_id: string | null; source_id: string };

/**
 * Links facts to concepts and counts the new links in one statement, unless a fact or a concept
 * of `unlessMerged` merged (then it writes nothing and returns false: the caller follows the
 * merges first). Every statement that changes links leaves `fact_count` exact (recountFacts, or
 * this one), so adding the links the insert returned gives the count a recount would make,
 * without counting a popular concept's thousands of links again for every page that names it;
 * a concept that gained no link is not written.
 */
async function linkUnlessMerged(
  trx: Knex.Transaction,
  links: readonly FactConceptLink[],
  unlessMerged: { factIds: readonly string[]; conceptIds: readonly string[] },
): Promise<boolean> {
  const result = (await trx.raw(
    `WITH merged AS (
       SELECT 1 FROM fact_concept_redirects WHERE fact_id = ANY(?::text[])
       UNION ALL
       SELECT 1 FROM concepts WHERE id = ANY(?::text[]) AND status = 'merged' AND merged_into IS NOT NULL
       LIMIT 1
     ), linked AS (
       INSERT INTO fact_concepts (fact_id, concept_id, repository_id, source_id)
       SELECT r.fact_id, r.concept_id, r.repository_id, r.source_id
         FROM jsonb_to_recordset(?::jsonb) AS r(fact_id text, concept_id text, repository_id text, source_id text)
        WHERE NOT EXISTS (SELECT 1 FROM merged)
       ON CONFLICT (fact_id, concept_id) DO NOTHING
       RETURNING concept_id
     ), counted AS (
       UPDATE concepts SET fact_count = concepts.fact_count + added.n
         FROM (SELECT concept_id, count(*) AS n FROM linked GROUP BY concept_id) AS added
        WHERE concepts.id = added.concept_id
       RETURNING 1
     )
     SELECT NOT EXISTS (SELECT 1 FROM merged) AS linked`,
    [[...new Set(unlessMerged.factIds)], [...new Set(unlessMerged.conceptIds)], JSON.stringify(links)],
  )) as { rows: Array<{ linked: boolean }> };
  return result.rows[0]?.linked === true;
}

type ConceptsExtracted = Extract<SourceEvent, { type: 'ConceptsExtracted' }>;

/**
 * The links of a run of ConceptsExtracted, each fact and concept replaced by its survivor (when
 * `survivors` are given). Of two links of one fact and concept the first stays, as the insert
 * of the later one would be ignored.
 */
function factConceptLinks(
  events: ReadonlyArray<RecordedOf<ConceptsExtracted>>,
  survivors?: { facts: Map<string, string>; concepts: Map<string, string> },
): FactConceptLink[] {
  const rows = new Map<string, FactConceptLink>();
  for (const recorded of events) {
    const sourceId = parseStreamName(recorded.streamId).id;
    for (const link of recorded.data.links) {
      const factId = survivors?.facts.get(link.fact_id) ?? link.fact_id;
      for (const rawConceptId of link.concept_ids) {
        const conceptId = survivors?.concepts.get(rawConceptId) ?? rawConceptId;
        const key = `${factId} ${conceptId}`;
        if (!rows.has(key)) rows.set(key, { fact_id: factId, concept_id: conceptId, repository_id: recorded.repositoryId, source_id: sourceId });
      }
    }
  }
  return [...rows.values()];
}

/**
 * Links the sources' facts to their concepts, on their survivors, for a run of
 * ConceptsExtracted. Nearly always none of them merged: one statement checks that and writes.
 * Otherwise the merge chains are followed and the links to the survivors written without the
 * check. Merges are other events, so the survivors cannot change within the run.
 */
async function applyConceptsExtracted(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<ConceptsExtracted>>): Promise<void> {
  const direct = factConceptLinks(events);
  if (direct.length === 0) return;
  const factIds = events.flatMap((event) => event.data.links.map((link) => link.fact_id));
  const conceptIds = events.flatMap((event) => event.data.links.flatMap((link) => link.concept_ids));
  if (await linkUnlessMerged(trx, direct, { factIds, conceptIds })) return;
  const survivors = { facts: await factSurvivors(trx, factIds), concepts: await conceptSurvivors(trx, conceptIds) };
  await linkUnlessMerged(trx, factConceptLinks(events, survivors), { factIds: [], conceptIds: [] });
}

/**
 * A fact merged into `survivorId`, in one statement: the redirect is recorded and the fact's
 * concept links move to its final survivor (followed from the fact's redirect as stored before
 * this statement, as followMerges would after the ignored insert), then the concepts it was
 * linked to are recounted. The recount cannot see this statement's own insert and delete, so it
 * adds the rows moved and subtracts those deleted: the count a recount afterwards would make.
 * The statement answers the concepts the fact was linked to (`moved`) and those its survivor was
 * linked to already: the pairs of a moved concept with either now share the survivor instead of
 * the fact (one fewer where both had both, one more where one had only the survivor), and are
 * counted again (recountRelations); pairs among the survivor's own concepts are unchanged.
 */
async function applyFactMerged(trx: Knex.Transaction, recorded: RecordedEvent<string, unknown>, factId: string, survivorId: string): Promise<void> {
  const { rows } = (await trx.raw(
    `WITH RECURSIVE redirect AS (
       INSERT INTO fact_concept_redirects (fact_id, survivor_id) VALUES (?, ?) ON CONFLICT (fact_id) DO NOTHING
     ), ${finalSurvivorSql('fact_concept_redirects')}, linked AS (
       SELECT concept_id, repository_id, source_id FROM fact_concepts WHERE fact_id = ? AND EXISTS (SELECT 1 FROM target)
     ), moved AS (
       INSERT INTO fact_concepts (fact_id, concept_id, repository_id, source_id)
       SELECT target.id, linked.concept_id, linked.repository_id, linked.source_id FROM linked, target
       ON CONFLICT (fact_id, concept_id) DO NOTHING
       RETURNING concept_id
     ), deleted AS (
       DELETE FROM fact_concepts WHERE fact_id = ? AND EXISTS (SELECT 1 FROM target)
       RETURNING concept_id
     ), counted AS (
       UPDATE concepts
          SET fact_count = (SELECT count(*) FROM fact_concepts WHERE fact_concepts.concept_id = concepts.id)
                         + (SELECT count(*) FROM moved WHERE moved.concept_id = concepts.id)
                         - (SELECT count(*) FROM deleted WHERE deleted.concept_id = concepts.id)
        WHERE concepts.id IN (SELECT concept_id FROM linked)
     )
     SELECT concept_id, repository_id, true AS moved FROM linked
     UNION ALL
     SELECT fact_concepts.concept_id, fact_concepts.repository_id, false FROM fact_concepts JOIN target ON fact_concepts.fact_id = target.id
      WHERE EXISTS (SELECT 1 FROM linked)`,
    [factId, survivorId, ...finalSurvivorParams(factId, survivorId), factId, factId],
  )) as { rows: Array<{ concept_id: string; repository_id: string | null; moved: boolean }> };
  const moved = rows.filter((row) => row.moved).map((row) => row.concept_id);
  const repositoryId = rows[0]?.repository_id;
  if (moved.length === 0 || !repositoryId) return;
  await recountRelations(trx, repositoryId, pairsAmong(moved, rows.map((row) => row.concept_id), recorded.occurredAt));
}

/**
 * A run of FactRetracted: the facts' links go and the concepts they were linked to are recounted
 * (fact_count), then the pairs of concepts that shared a retracted fact are counted again
 * (recountRelations), so a relation it made shrinks or goes at once. Only those pairs: no other
 * pair shared the facts. Each pair changes at the time of the last retraction that touched it, as
 * applying the events one after another would leave it.
 */
async function applyFactsRetracted(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<Extract<FactEvent, { type: 'FactRetracted' }>>>): Promise<void> {
  // Per fact, its last retraction of the run (log order).
  const retractions = new Map(events.map((event, order) => [parseStreamName(event.streamId).id, { order, at: event.occurredAt }]));
  const { rows } = (await trx.raw(`DELETE FROM fact_concepts WHERE fact_id = ANY(?::text[]) RETURNING fact_id, concept_id, repository_id`, [
    [...retractions.keys()],
  ])) as { rows: Array<{ fact_id: string; concept_id: string; repository_id: string | null }> };
  await recountFacts(trx, rows.map((row) => row.concept_id));
  // Per repository, then per fact in log order (a pair two facts shared keeps the later time): its concepts.
  const linked = new Map<string, Map<string, { at: string; concepts: string[] }>>();
  const inLogOrder = [...rows].sort((x, y) => (retractions.get(x.fact_id)?.order ?? 0) - (retractions.get(y.fact_id)?.order ?? 0));
  for (const row of inLogOrder) {
    const retraction = retractions.get(row.fact_id);
    if (!row.repository_id || !retraction) continue;
    const facts = linked.get(row.repository_id) ?? new Map<string, { at: string; concepts: string[] }>();
    linked.set(row.repository_id, facts);
    const fact = facts.get(row.fact_id) ?? { at: retraction.at, concepts: [] };
    facts.set(row.fact_id, fact);
    fact.concepts.push(row.concept_id);
  }
  for (const [repositoryId, facts] of linked) {
    await recountRelations(trx, repositoryId, [...facts.values()].flatMap((fact) => pairsAmong(fact.concepts, fact.concepts, fact.at)));
  }
}

/**
 * A run of ConceptRelationsRefreshed: the changes of all its events in upserts and deletes of at
 * most RELATION_ROWS_PER_STATEMENT rows each (a catch-up's run can hold a repository's every
 * pair). Pairs are stored ordered (a < b) whatever order an event gives; of two changes of one
 * pair the later wins, as applying them in turn would leave it.
 *
 * A pair of a concept merged by now is not written: the refresh read the read models before the
 * merge was applied (a merged concept has no links to count, and its merge deleted its rows), and
 * the merge counted the survivor's pairs itself (carryRelationsToSurvivor). Writing it back would
 * relate a merged concept until the next refresh. Its deletions (0) still apply: they delete
 * nothing a merge left. No type of the ConceptCreated group merges a concept, so whether one is
 * merged is the same anywhere in a run.
 */
async function applyRelations(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<Extract<RepositoryEvent, { type: 'ConceptRelationsRefreshed' }>>>): Promise<void> {
  const latest = new Map<string, { repository_id: string; concept_a: string; concept_b: string; shared_fact_count: number; updated_at: string }>();
  for (const event of events) {
    const repositoryId = parseStreamName(event.streamId).id;
    for (const change of event.data.changes) {
      const [a, b] = change.concept_a < change.concept_b ? [change.concept_a, change.concept_b] : [change.concept_b, change.concept_a];
      latest.set(JSON.stringify([repositoryId, a, b]), { repository_id: repositoryId, concept_a: a, concept_b: b, shared_fact_count: change.shared_fact_count, updated_at: event.occurredAt });
    }
  }
  const removed = [...latest.values()].filter((change) => change.shared_fact_count <= 0);
  const kept = [...latest.values()].filter((change) => change.shared_fact_count > 0);
  for (const rows of chunked(removed, RELATION_ROWS_PER_STATEMENT)) {
    await trx.raw(
      `DELETE FROM concept_relations USING jsonb_to_recordset(?::jsonb) AS r(repository_id text, concept_a text, concept_b text)
        WHERE concept_relations.repository_id = r.repository_id AND concept_relations.concept_a = r.concept_a AND concept_relations.concept_b = r.concept_b
          AND concept_relations.repository_id = ANY(?::text[]) AND concept_relations.concept_a = ANY(?::text[])`,
      // The leading key columns again as arrays, for an index lookup (see updateRows).
      [JSON.stringify(rows), [...new Set(rows.map((change) => change.repository_id))], [...new Set(rows.map((change) => change.concept_a))]],
    );
  }
  for (const rows of chunked(kept, RELATION_ROWS_PER_STATEMENT)) {
    await trx.raw(
      `INSERT INTO concept_relations (repository_id, concept_a, concept_b, shared_fact_count, updated_at)
       SELECT r.repository_id, r.concept_a, r.concept_b, r.shared_fact_count, r.updated_at
         FROM jsonb_to_recordset(?::jsonb) AS r(repository_id text, concept_a text, concept_b text, shared_fact_count int, updated_at timestamptz)
        WHERE NOT EXISTS (SELECT 1 FROM concepts WHERE concepts.id IN (r.concept_a, r.concept_b) AND concepts.status = 'merged')
       ON CONFLICT (repository_id, concept_a, concept_b) DO UPDATE SET shared_fact_count = excluded.shared_fact_count, updated_at = excluded.updated_at`,
      [JSON.stringify(rows)],
    );
  }
}

/**
 * A run of ConceptCreated in one statement: the concepts (a concept whose identity exists already
 * is skipped, the first of a run included) with their alias text, then the aliases of those
 * inserted. A fresh concept has no alias rows yet, so its alias text (the aliases other than the
 * canonical name, ordered as refreshAliasText orders them) comes from the event itself.
 */
async function applyConceptsCreated(
  trx: Knex.Transaction,
  events: ReadonlyArray<RecordedOf<Extract<ConceptEvent, { type: 'ConceptCreated' }>>>,
  embeddings: ReadonlyMap<string, ConceptEmbedding> = new Map(),
): Promise<void> {
  const concepts = events.map((event, n) => {
    const id = parseStreamName(event.streamId).id;
    const embedding = embeddings.get(id);
    const repositoryId = event.repositoryId ?? '';
    const aliases = aliasRows([{ id, repositoryId, context: event.data.context, aliases: [event.data.canonical_name, ...event.data.aliases] }]);
    return {
      n,
      id,
      repository_id: event.repositoryId,
      canonical_name: event.data.canonical_name,
      // As the event spelt it may be decomposed (before names were composed): keyed as ids and aliases are.
      name_key: conceptNameKey(event.data.canonical_name),
      context: event.data.context,
      ontology_class: event.data.ontology_class,
      source_id: event.data.source_id,
      at: event.occurredAt,
      embedding_model: embedding?.model ?? null,
      embedded_at: embedding?.at ?? null,
      aliases,
    };
  });
  await trx.raw(
    `WITH input AS (
       SELECT * FROM jsonb_to_recordset(?::jsonb)
         AS r(n int, id text, repository_id text, canonical_name text, name_key text, context text, ontology_class text, source_id text, at timestamptz,
              embedding_model text, embedded_at timestamptz, aliases jsonb)
     ), created AS (
       -- In log order: of two ConceptCreated of one stream (one id), the first stays. Two ids of
       -- one name key are both kept (twins from before names were composed, merged by an event).
       -- fact_count counts links that came first: fed from the bus, a source's ConceptsExtracted
       -- (source topic) may be applied before the concept's ConceptCreated (concept topic).
       INSERT INTO concepts (id, repository_id, canonical_name, name_key, context, ontology_class, status, source_id, created_at, updated_at, alias_text, embedding_model, fact_count)
       SELECT r.id, r.repository_id, r.canonical_name, r.name_key, r.context, r.ontology_class, 'active', r.source_id, r.at, COALESCE(r.embedded_at, r.at),
              COALESCE((SELECT string_agg(a.alias, ' ' ORDER BY a.alias_lower)
                          FROM jsonb_to_recordset(r.aliases) AS a(alias text, alias_lower text)
                         WHERE a.alias_lower <> r.name_key), '')
              , r.embedding_model
              , (SELECT count(*) FROM fact_concepts fc WHERE fc.concept_id = r.id)
         FROM input r
        ORDER BY r.n
       ON CONFLICT (id) DO NOTHING RETURNING id
     ), embedded AS (
       -- The embeddings of concepts stored before this statement (its snapshot does not see the
       -- rows it inserts, which carry theirs already).
       UPDATE concepts SET embedding_model = e.model, updated_at = e.at
         FROM jsonb_to_recordset(?::jsonb) AS e(id text, model text, at timestamptz)
        WHERE concepts.id = e.id AND concepts.id = ANY(?::text[])
       RETURNING 1
     )
     -- A stream's ConceptCreated may come twice (a twin in another spelling): the first one's row was inserted.
     INSERT INTO concept_aliases (concept_id, repository_id, alias, alias_lower, context_lower)
     SELECT a.concept_id, a.repository_id, a.alias, a.alias_lower, a.context_lower
       FROM (SELECT DISTINCT ON (r.id) r.aliases FROM input r JOIN created ON created.id = r.id ORDER BY r.id, r.n) AS fresh,
            jsonb_to_recordset(fresh.aliases) AS a(concept_id text, repository_id text, alias text, alias_lower text, context_lower text)
     ON CONFLICT (concept_id, alias_lower) DO NOTHING`,
    [JSON.stringify(concepts), JSON.stringify([...embeddings].map(([id, change]) => ({ id, ...change }))), [...embeddings.keys()]],
  );
}

type ConceptEmbedding = { model: string; at: string };

/** A concept embedded twice ends with the later model, as one update after another would. */
function embeddingsOf(events: ReadonlyArray<RecordedOf<Extract<ConceptEvent, { type: 'ConceptEmbedded' }>>>): Map<string, ConceptEmbedding> {
  return new Map(events.map((event) => [parseStreamName(event.streamId).id, { model: event.data.model, at: event.occurredAt }]));
}

async function applyConceptsEmbedded(trx: Knex.Transaction, latest: ReadonlyMap<string, ConceptEmbedding>): Promise<void> {
  if (latest.size === 0) return;
  await trx.raw(
    `UPDATE concepts SET embedding_model = r.model, updated_at = r.at
       FROM jsonb_to_recordset(?::jsonb) AS r(id text, model text, at timestamptz)
      WHERE concepts.id = r.id AND concepts.id = ANY(?::text[])`,
    // The ids again as an array, for an index lookup (see updateRows).
    [JSON.stringify([...latest].map(([id, change]) => ({ id, ...change }))), [...latest.keys()]],
  );
}

/**
 * A run of the ConceptCreated group, as the types' handlers would leave it one type after the
 * other, with each new concept written once: the links first, then the creations and embeddings
 * in one statement (a new concept is inserted with its embedding and with its fact_count counted
 * from the links just written, not updated for them), then the relation changes (their own table).
 *
 * Links before creations leaves the same rows: fact_concepts has no reference to concepts, a link
 * checks only whether a concept stored before merged (one created in the run has not), and the
 * link statement's recount updates the concepts stored before, while each concept the run inserts
 * counts its links as it is inserted (applyConceptsCreated: as fed from the bus, where links may
 * come first). Created after its links, a concept is no longer inserted and then updated again for
 * the recount: a second row version, its search tsvector computed again and an entry in each of
 * its four indexes (docs/performance.md, "Catch-up, fourth round").
 */
async function applyConceptsRun(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<Handled>>): Promise<void> {
  const created: Array<RecordedOf<Extract<ConceptEvent, { type: 'ConceptCreated' }>>> = [];
  const embedded: Array<RecordedOf<Extract<ConceptEvent, { type: 'ConceptEmbedded' }>>> = [];
  const extracted: Array<RecordedOf<ConceptsExtracted>> = [];
  const relations: Array<RecordedOf<Extract<RepositoryEvent, { type: 'ConceptRelationsRefreshed' }>>> = [];
  for (const event of events) {
    if (event.type === 'ConceptCreated') created.push(event);
    else if (event.type === 'ConceptEmbedded') embedded.push(event);
    else if (event.type === 'ConceptsExtracted') extracted.push(event);
    else if (event.type === 'ConceptRelationsRefreshed') relations.push(event);
    else throw new Error(`concepts: ${event.type} is not in the ConceptCreated group`);
  }
  if (extracted.length > 0) await applyConceptsExtracted(trx, extracted);
  if (created.length > 0) await applyConceptsCreated(trx, created, embeddingsOf(embedded));
  else await applyConceptsEmbedded(trx, embeddingsOf(embedded));
  if (relations.length > 0) await applyRelations(trx, relations);
}

/**
 * Read models `concepts`, `concept_aliases`, `fact_concepts` and `concept_relations`
 * (docs/pipeline.md, "Read models"). A concept's canonical name is also one of its alias rows,
 * so alias resolution finds it by either. Links to a merged fact or concept land on the
 * survivor; merges move aliases and links, recount `fact_count` and carry the merged concept's
 * relations to the survivor (carryRelationsToSurvivor); a fact's merge or retraction counts the
 * pairs of its concepts again (recountRelations). Fact merges are followed
 * through `fact_concept_redirects`, this projection's own record of them.
 */
export const conceptsProjection = projection<Handled>({
  name: 'concepts',
  tables: ['concepts', 'concept_aliases', 'fact_concepts', 'concept_relations', 'fact_concept_redirects'],
  // A concept is created before it is embedded, and before any source links it: extract_concepts
  // appends a batch's ConceptsExtracted only once the concepts it links exist (created or found).
  // Concepts are independent of each other, and links only add rows and recount, so a run of
  // these types may create all, embed all, then link all.
  // Relation changes write only concept_relations, which no other type of the group reads or
  // writes, and read only whether a concept merged, which none changes, so they join the run too
  // (merges, which move links, still end it).
  batchTogether: [{ types: ['ConceptCreated', 'ConceptEmbedded', 'ConceptsExtracted', 'ConceptRelationsRefreshed'], handler: applyConceptsRun }],
  // What counts or moves the links that any source's ConceptsExtracted may be adding: applied
  // side by side with it, a creation would not count its new links, a fact's merge would leave
  // them on the merged fact, a recount would miss them.
  exclusive: ['ConceptCreated', 'ConceptMergedInto', 'FactMergedInto', 'FactRetracted'],
  handlers: {
    ConceptCreated: (trx, events) => applyConceptsCreated(trx, events),
    ConceptAliasAdded: each(async (trx, event) => {
      const streamId = parseStreamName(event.streamId).id;
      const concept = await liveConcept(trx, streamId);
      if (!concept) return;
      await insertAliases(trx, [{ id: streamId, repositoryId: concept.repository_id, context: concept.context, aliases: [event.data.alias] }]);
      await refreshAliasText(trx, streamId);
      await trx('concepts').where({ id: streamId }).update({ updated_at: event.occurredAt });
    }),
    ConceptAliasRemoved: each(async (trx, event) => {
      const streamId = parseStreamName(event.streamId).id;
      const concept = await liveConcept(trx, streamId);
      if (!concept) return;
      const aliasLower = conceptNameKey(event.data.alias);
      // The canonical name's own row stays: it is how the concept is found by name.
      if (aliasLower === conceptNameKey(concept.canonical_name)) return;
      await trx('concept_aliases').where({ concept_id: streamId, alias_lower: aliasLower }).delete();
      await refreshAliasText(trx, streamId);
      await trx('concepts').where({ id: streamId }).update({ updated_at: event.occurredAt });
    }),
    // One statement for the run.
    ConceptEmbedded: (trx, events) => applyConceptsEmbedded(trx, embeddingsOf(events)),
    ConceptMergedInto: each((trx, event) => applyConceptMerged(trx, event, parseStreamName(event.streamId).id, event.data.survivor_id)),
    ConceptsExtracted: applyConceptsExtracted,
    FactMergedInto: each((trx, event) => applyFactMerged(trx, event, parseStreamName(event.streamId).id, event.data.survivor_id)),
    FactRetracted: applyFactsRetracted,
    ConceptRelationsRefreshed: applyRelations,
  },
});

/** The concept's row unless it is missing or merged (alias changes of a merged concept are ignored). */
async function liveConcept(trx: Knex.Transaction, conceptId: string) {
  const concept = (await trx('concepts').where({ id: conceptId }).first('context', 'repository_id', 'canonical_name', 'status')) as
    | { context: string; repository_id: string; canonical_name: string; status: string }
    | undefined;
  return concept && concept.status !== 'merged' ? concept : null;
}
