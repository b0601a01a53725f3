import type { Test } from 'tap';
import type { Database } from '../../../src/db/database.js';
import { conceptDecider, conceptIdFor } from '../../../src/domain/concept/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import type { ChatModel, ConceptCandidate, RefinementInput } from '../../../src/providers/llm/port.js';
import { createExtractConceptsStage } from '../../../src/pipeline/stages/extractConcepts.js';
import { createRefineConceptsStage } from '../../../src/pipeline/stages/refineConcepts.js';
import { resolveConcept } from '../../../src/read/concepts.js';
import { concepts } from '../../../src/search/collections/index.js';
import { openStageFixture, testMetadata } from '../stageFixture.js';
import { deduplicatedSource, scriptedChat } from './conceptStage.js';

/**
 * Concept names compared in SQL by the key conceptNameKey made (stored as `alias_lower` and
 * `concepts.name_key`), never by PostgreSQL's lower(), whose answer follows the database's ctype:
 * in a C-ctype database it lower-cases ASCII only (`ÉMILE` ≠ `émile`), in a UTF-8 one it maps
 * `Σ` to `σ` where the key keeps the final `ς`, and in none does it compose a decomposed name.
 * The same suite runs on PGlite (test/pipeline/stages/conceptNames.test.ts) and on the server in
 * a C-locale and a default-locale database (conceptNames.server.test.ts); `open` gives the
 * migrated database.
 */
export async function conceptNameSuite(t: Test, open?: () => Promise<Database>): Promise<void> {
  const fixture = await openStageFixture(t, open ? { open } : {});
  const knex = fixture.db.knex;

  /** A concept as the decider creates it (names composed). */
  async function created(repositoryId: string, name: string, context: string, aliases: string[] = []): Promise<string> {
    const id = conceptIdFor(repositoryId, name, context);
    await handleCommand(fixture.store, streamName('concept', id), conceptDecider, {
      type: 'CreateConcept', canonicalName: name, context, ontologyClass: null, aliases, sourceId: null,
    }, testMetadata(repositoryId));
    return id;
  }

  /** A ConceptCreated as a release before names were composed recorded it: the canonical name as a model spelt it. */
  async function recordedAsWritten(repositoryId: string, name: string, context: string): Promise<string> {
    const id = conceptIdFor(repositoryId, name, context);
    const data = { canonical_name: name, context, ontology_class: null, aliases: [], source_id: null };
    await fixture.store.append(streamName('concept', id), [{ type: 'ConceptCreated', data, metadata: testMetadata(repositoryId) }], 'any');
    return id;
  }

  const idOf = async (repositoryId: string, asked: string, context?: string) => (await resolveConcept(knex, repositoryId, asked, context)).concept.id;

  t.test('Émile Zola is found as ÉMILE ZOLA and émile zola, and extracted under both spellings and by an alias is one concept', async (t) => {
    const repositoryId = await fixture.createRepository();
    const stage = (answer: ConceptCandidate) =>
      createExtractConceptsStage({ store: fixture.store, knex, chat: scriptedChat(() => [answer]), batchSize: 10, concurrency: 1, maxAttempts: 3 });
    const answers: Array<Omit<ConceptCandidate, 'factIds'> & { fact: string }> = [
      { fact: 'Émile Zola wrote Germinal.', canonicalName: 'Émile Zola', context: 'person', aliases: ['Zola'] },
      { fact: 'ÉMILE ZOLA WROTE J’ACCUSE.', canonicalName: 'ÉMILE ZOLA', context: 'person', aliases: [] },
      // Resolved by its alias, which is the existing concept's canonical name in another case.
      { fact: 'E. Zola died in Paris.', canonicalName: 'E. Zola', context: 'person', aliases: ['émile zola'] },
    ];
    const factIds: string[] = [];
    for (const { fact, ...answer } of answers) {
      const source = await deduplicatedSource(fixture, repositoryId, [fact]);
      factIds.push(...source.factIds);
      const extract = stage({ ...answer, factIds: source.factIds });
      await extract.run(fixture.contextFor(extract, source.trigger));
      await fixture.settle();
    }
    const zola = conceptIdFor(repositoryId, 'Émile Zola', 'person');
    const creations = (await fixture.eventsOfType('ConceptCreated')).filter((event) => event.repositoryId === repositoryId);
    t.same(creations.map((event) => event.data.canonical_name), ['Émile Zola'], 'one concept is created');
    t.same(await knex('concepts').where({ repository_id: repositoryId }).pluck('id'), [zola], 'one row');
    t.same((await knex('fact_concepts').where({ concept_id: zola }).pluck('fact_id')).sort(), factIds.sort(), 'every fact links to it');
    for (const asked of ['ÉMILE ZOLA', 'émile zola', 'E\u0301MILE ZOLA', 'Émile Zola']) {
      t.equal(await idOf(repositoryId, asked), zola, asked);
      t.equal(await idOf(repositoryId, asked, 'PERSON'), zola, `${asked} in a context`);
    }
  });

  t.test('ＡＩ in full-width letters is AI: extracted under both spellings one concept, found by either; Müller and Muller stay two', async (t) => {
    const repositoryId = await fixture.createRepository();
    const stage = (answer: ConceptCandidate) =>
      createExtractConceptsStage({ store: fixture.store, knex, chat: scriptedChat(() => [answer]), batchSize: 10, concurrency: 1, maxAttempts: 3 });
    const answers: Array<Omit<ConceptCandidate, 'factIds'> & { fact: string }> = [
      { fact: 'AI systems learn from data.', canonicalName: 'AI', context: 'field', aliases: [] },
      { fact: 'ＡＩ研究は1956年に始まった。', canonicalName: 'ＡＩ', context: 'field', aliases: ['Artiﬁcial Intelligence'] },
      { fact: 'Hans Müller painted in Vienna.', canonicalName: 'Hans Müller', context: 'person', aliases: [] },
      { fact: 'Hans Muller sailed to Boston.', canonicalName: 'Hans Muller', context: 'person', aliases: [] },
    ];
    for (const { fact, ...answer } of answers) {
      const source = await deduplicatedSource(fixture, repositoryId, [fact]);
      const extract = stage({ ...answer, factIds: source.factIds });
      await extract.run(fixture.contextFor(extract, source.trigger));
      await fixture.settle();
    }
    const ai = conceptIdFor(repositoryId, 'AI', 'field');
    const creations = (await fixture.eventsOfType('ConceptCreated')).filter((event) => event.repositoryId === repositoryId);
    t.same(creations.map((event) => event.data.canonical_name), ['AI', 'Hans Müller', 'Hans Muller'], 'ＡＩ is AI; Müller and Muller are two');
    for (const asked of ['AI', 'ＡＩ', 'ａｉ', 'Artificial Intelligence', 'Artiﬁcial Intelligence']) t.equal(await idOf(repositoryId, asked), ai, asked);
  });

  t.test('a canonical name in another case is answered before an alias that another concept shares', async (t) => {
    const repositoryId = await fixture.createRepository();
    const zola = await created(repositoryId, 'Émile Zola', 'person');
    await created(repositoryId, 'Zola', 'person', ['Émile Zola']);
    await fixture.settle();
    t.equal(await idOf(repositoryId, 'émile zola'), zola);
    const odos = await created(repositoryId, 'ΟΔΟΣ', 'location');
    await created(repositoryId, 'Odos', 'location', ['ΟΔΟΣ']);
    await fixture.settle();
    // Lower-cased, its key ends in the final ς; lower() in a UTF-8 database gives σ.
    t.equal(await idOf(repositoryId, 'οδος'), odos);
    t.equal(await idOf(repositoryId, 'ΟΔΟΣ', 'location'), odos, 'in its context too');
  });

  t.test('two concepts whose keys differ are two rows, though lower() makes their names one', async (t) => {
    const repositoryId = await fixture.createRepository();
    const capitals = await created(repositoryId, 'ΟΔΟΣ', 'location');
    const small = await created(repositoryId, 'οδοσ', 'location');
    t.not(capitals, small, 'two ids: the keys are οδος and οδοσ');
    await fixture.settle();
    t.same((await knex('concepts').where({ repository_id: repositoryId, status: 'active' }).pluck('id')).sort(), [small, capitals].sort(), 'both projected');
    t.equal(await idOf(repositoryId, 'ΟΔΟΣ'), capitals);
    t.equal(await idOf(repositoryId, 'οδοσ'), small);
  });

  t.test('a canonical name is never counted or indexed as its own alias', async (t) => {
    const repositoryId = await fixture.createRepository();
    const zola = await created(repositoryId, 'Émile Zola', 'person');
    const curie = await created(repositoryId, 'Institut Curie', 'organization', ['Curie']);
    const cafe = await recordedAsWritten(repositoryId, 'Cafe\u0301 de Flore', 'location');
    await fixture.settle();
    const rows = new Map((await knex('concepts').where({ repository_id: repositoryId }).select('id', 'alias_text')).map((row: { id: string; alias_text: string }) => [row.id, row.alias_text]));
    t.same([rows.get(zola), rows.get(curie), rows.get(cafe)], ['', 'Curie', ''], 'the search text holds the other aliases only');
    const indexed = await fixture.search.search(concepts, { repositoryId, query: '', limit: 10, offset: 0 });
    t.same(new Map(indexed.items.map((item) => [item.id, item.aliases])), new Map([[zola, []], [curie, ['Curie']], [cafe, []]]), 'as the search index lists them');

    // Refinement asks about a context's single concept only when it carries aliases to prune:
    // of the three contexts, only the one of Institut Curie.
    const asked: RefinementInput[] = [];
    const chat: ChatModel = {
      ...createLocalChatModel(),
      async refineConcepts(input) {
        asked.push(input);
        return [];
      },
    };
    const refine = createRefineConceptsStage({ store: fixture.store, knex, chat, maxCandidates: 40, pruneThreshold: 1, maxConcurrency: 1 });
    await refine.run(fixture.scheduledContextFor(refine, repositoryId));
    t.same(asked.map((input) => input.concepts.map((concept) => [concept.id, concept.aliases])), [[[curie, ['Curie']]]], 'no concept without aliases is taken for one with an alias to prune');
  });
}
