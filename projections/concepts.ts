import type { Knex } from 'knex';
import type { Projection } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import type { ConceptEvent } from '../src/domain/concept/events.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { followMerges } from './mergeChains.js';

type Handled =
  | ConceptEvent
  | Extract<SourceEvent, { type: 'ConceptsExtracted' }>
  | Extract<FactEvent, { type: 'FactMergedInto' }>
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

/** alias_text = the aliases other than the canonical name, space-joined (feeds concepts.search). */
async function refreshAliasText(trx: Knex.Transaction, conceptId: string): Promise<void> {
  await trx('concepts')
    .where({ id: conceptId })
    .update({
      alias_text: trx.raw(
        `COALESCE((SELECT string_agg(alias, ' ' ORDER BY alias_lower) FROM concept_aliases
           WHERE concept_aliases.concept_id = concepts.id AND alias_lower <> lower(concepts.canonical_name)), '')`,
      ),
    });
}

async function insertAliases(
  trx: Knex.Transaction,
  concept: { id: string; repositoryId: string; context: string },
  aliases: readonly string[],
): Promise<void> {
  const rows = new Map<string, Record<string, unknown>>();
  for (const alias of aliases) {
    const trimmed = alias.trim();
    if (trimmed === '' || rows.has(trimmed.toLowerCase())) continue;
    rows.set(trimmed.toLowerCase(), {
      concept_id: concept.id,
      repository_id: concept.repositoryId,
      alias: trimmed,
      alias_lower: trimmed.toLowerCase(),
      context_lower: concept.context.toLowerCase(),
    });
  }
  if (rows.size === 0) return;
  await trx('concept_aliases').insert([...rows.values()]).onConflict(['concept_id', 'alias_lower']).ignore();
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

async function applyConceptMerged(trx: Knex.Transaction, recorded: RecordedEvent, conceptId: string, survivorId: string): Promise<void> {
  const loser = (await trx('concepts').where({ id: conceptId }).first('id', 'status')) as { id: string; status: string } | undefined;
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
    await insertAliases(trx, { id: finalSurvivor, repositoryId: survivor.repository_id, context: survivor.context }, aliases);
  }
  await trx('concept_aliases').where({ concept_id: conceptId }).delete();
  await refreshAliasText(trx, conceptId);
  await refreshAliasText(trx, finalSurvivor);
  await moveConceptLinks(trx, conceptId, finalSurvivor);
  await recountFacts(trx, [conceptId, finalSurvivor]);
  await trx('concepts').where({ id: finalSurvivor }).update({ updated_at: recorded.occurredAt });
}

async function applyConceptsExtracted(
  trx: Knex.Transaction,
  recorded: RecordedEvent,
  links: ReadonlyArray<{ fact_id: string; concept_ids: string[] }>,
): Promise<void> {
  const sourceId = parseStreamName(recorded.streamId).id;
  const facts = await factSurvivors(trx, links.map((link) => link.fact_id));
  const concepts = await conceptSurvivors(trx, links.flatMap((link) => link.concept_ids));
  const rows = new Map<string, Record<string, unknown>>();
  for (const link of links) {
    const factId = facts.get(link.fact_id) ?? link.fact_id;
    for (const rawConceptId of link.concept_ids) {
      const conceptId = concepts.get(rawConceptId) ?? rawConceptId;
      rows.set(`${factId} ${conceptId}`, { fact_id: factId, concept_id: conceptId, repository_id: recorded.repositoryId, source_id: sourceId });
    }
  }
  if (rows.size === 0) return;
  await trx('fact_concepts').insert([...rows.values()]).onConflict(['fact_id', 'concept_id']).ignore();
  await recountFacts(trx, [...rows.values()].map((row) => String(row.concept_id)));
}

async function applyFactMerged(trx: Knex.Transaction, recorded: RecordedEvent, factId: string, survivorId: string): Promise<void> {
  await trx('fact_concept_redirects').insert({ fact_id: factId, survivor_id: survivorId }).onConflict('fact_id').ignore();
  const finalSurvivor = (await factSurvivors(trx, [factId])).get(factId) ?? survivorId;
  if (finalSurvivor === factId) return;
  const conceptIds = (await trx('fact_concepts').where({ fact_id: factId }).pluck('concept_id')) as string[];
  if (conceptIds.length === 0) return;
  await trx.raw(
    `INSERT INTO fact_concepts (fact_id, concept_id, repository_id, source_id)
     SELECT ?, concept_id, repository_id, source_id FROM fact_concepts WHERE fact_id = ?
     ON CONFLICT (fact_id, concept_id) DO NOTHING`,
    [finalSurvivor, factId],
  );
  await trx('fact_concepts').where({ fact_id: factId }).delete();
  await recountFacts(trx, conceptIds);
}

async function applyRelations(
  trx: Knex.Transaction,
  recorded: RecordedEvent,
  changes: ReadonlyArray<{ concept_a: string; concept_b: string; shared_fact_count: number }>,
): Promise<void> {
  const repositoryId = parseStreamName(recorded.streamId).id;
  for (const change of changes) {
    // Pairs are stored ordered (a < b) whatever order the event gives.
    const [a, b] = change.concept_a < change.concept_b ? [change.concept_a, change.concept_b] : [change.concept_b, change.concept_a];
    const key = { repository_id: repositoryId, concept_a: a, concept_b: b };
    if (change.shared_fact_count <= 0) {
      await trx('concept_relations').where(key).delete();
      continue;
    }
    await trx('concept_relations')
      .insert({ ...key, shared_fact_count: change.shared_fact_count, updated_at: recorded.occurredAt })
      .onConflict(['repository_id', 'concept_a', 'concept_b'])
      .merge(['shared_fact_count', 'updated_at']);
  }
}

/**
 * Read models `concepts`, `concept_aliases`, `fact_concepts` and `concept_relations`
 * (docs/pipeline.md, "Read models"). A concept's canonical name is also one of its alias rows,
 * so alias resolution finds it by either. Links to a merged fact or concept land on the
 * survivor; merges move aliases and links and recount `fact_count`. Fact merges are followed
 * through `fact_concept_redirects`, this projection's own record of them.
 */
export const conceptsProjection: Projection = {
  name: 'concepts',
  eventTypes: [
    'ConceptCreated',
    'ConceptAliasAdded',
    'ConceptAliasRemoved',
    'ConceptEmbedded',
    'ConceptMergedInto',
    'ConceptsExtracted',
    'FactMergedInto',
    'ConceptRelationsRefreshed',
  ],
  tables: ['concepts', 'concept_aliases', 'fact_concepts', 'concept_relations', 'fact_concept_redirects'],
  async apply(trx, recorded) {
    const event = recorded as unknown as Handled & RecordedEvent;
    const streamId = parseStreamName(recorded.streamId).id;
    switch (event.type) {
      case 'ConceptCreated': {
        const inserted = (await trx.raw(
          `INSERT INTO concepts (id, repository_id, canonical_name, context, ontology_class, status, source_id, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)
           ON CONFLICT DO NOTHING RETURNING id`,
          [
            streamId,
            recorded.repositoryId,
            event.data.canonical_name,
            event.data.context,
            event.data.ontology_class,
            event.data.source_id,
            recorded.occurredAt,
            recorded.occurredAt,
          ],
        )) as { rows: unknown[] };
        if (inserted.rows.length === 0) return; // a concept of the same identity exists already
        await insertAliases(
          trx,
          { id: streamId, repositoryId: recorded.repositoryId ?? '', context: event.data.context },
          [event.data.canonical_name, ...event.data.aliases],
        );
        await refreshAliasText(trx, streamId);
        return;
      }
      case 'ConceptAliasAdded':
      case 'ConceptAliasRemoved': {
        const concept = (await trx('concepts').where({ id: streamId }).first('context', 'repository_id', 'canonical_name', 'status')) as
          | { context: string; repository_id: string; canonical_name: string; status: string }
          | undefined;
        if (!concept || concept.status === 'merged') return;
        if (event.type === 'ConceptAliasAdded') {
          await insertAliases(trx, { id: streamId, repositoryId: concept.repository_id, context: concept.context }, [event.data.alias]);
        } else {
          const aliasLower = event.data.alias.trim().toLowerCase();
          // The canonical name's own row stays: it is how the concept is found by name.
          if (aliasLower === concept.canonical_name.toLowerCase()) return;
          await trx('concept_aliases').where({ concept_id: streamId, alias_lower: aliasLower }).delete();
        }
        await refreshAliasText(trx, streamId);
        await trx('concepts').where({ id: streamId }).update({ updated_at: recorded.occurredAt });
        return;
      }
      case 'ConceptEmbedded':
        await trx('concepts').where({ id: streamId }).update({ embedding_model: event.data.model, updated_at: recorded.occurredAt });
        return;
      case 'ConceptMergedInto':
        await applyConceptMerged(trx, recorded, streamId, event.data.survivor_id);
        return;
      case 'ConceptsExtracted':
        await applyConceptsExtracted(trx, recorded, event.data.links);
        return;
      case 'FactMergedInto':
        await applyFactMerged(trx, recorded, streamId, event.data.survivor_id);
        return;
      case 'ConceptRelationsRefreshed':
        await applyRelations(trx, recorded, event.data.changes);
        return;
    }
  },
};
