import t from 'tap';
import { conceptDecider, conceptIdFor } from '../../../src/domain/concept/decider.js';
import { repositoryDecider } from '../../../src/domain/repository/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../../src/eventstore/envelope.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import { ModelCallError, type ConceptCandidate, type ConceptExtractionInput } from '../../../src/providers/llm/port.js';
import { effectivePromptset } from '../../../src/providers/llm/promptsets.js';
import { PermanentJobError } from '../../../src/pipeline/types.js';
import { createExtractConceptsStage } from '../../../src/pipeline/stages/extractConcepts.js';
import { createMigrateContextStage } from '../../../src/pipeline/stages/migrateContext.js';
import { createRefineConceptsStage } from '../../../src/pipeline/stages/refineConcepts.js';
import { createRefreshConceptRelationsStage, relationChanges } from '../../../src/pipeline/stages/refreshConceptRelations.js';
import { namedLocks } from '../../../src/db/namedLock.js';
import { openStageFixture, racedStore, testMetadata } from '../stageFixture.js';
import { deduplicatedSource, scriptedChat } from './conceptStage.js';
import { isConcurrencyError } from '../../../src/pipeline/runtime.js';

t.setTimeout(300_000);

const conceptTypes = ['ConceptCreated', 'ConceptAliasAdded', 'ConceptAliasRemoved', 'ConceptMergedInto'];

t.test('extract_concepts with the local chat model', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const chat = createLocalChatModel();
  const stage = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 2, concurrency: 2, maxAttempts: 3 });
  t.same(stage.triggers, ['SourceFactsDeduplicated']);
  const source = await deduplicatedSource(fixture, repositoryId, [
    'Marie Curie discovered polonium in Paris.',
    'Marie Curie won the Nobel Prize in Physics in 1903.',
    'Pierre Curie worked at the University of Paris.',
  ]);
  await stage.run(fixture.contextFor(stage, source.trigger));
  const stream = streamName('source', source.sourceId);
  const batches = await fixture.eventsOf(stream, 'ConceptsExtracted');
  t.same(batches.map((event) => event.data.batch_index).sort(), [0, 1], 'three facts in batches of two');
  for (const batch of batches) {
    t.match(batch.data, { model_id: chat.modelId, promptset_hash: effectivePromptset({}).hash, batch_count: 2 });
  }
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const created = await fixture.eventsOf(streamName('concept', marie), 'ConceptCreated');
  t.equal(created.length, 1, 'Marie Curie is created once although two batches mention her');
  t.match(created[0].data, { canonical_name: 'Marie Curie', context: 'person', source_id: source.sourceId });
  const links = batches.flatMap((batch) => batch.data.links as Array<{ fact_id: string; concept_ids: string[] }>);
  const linkedToMarie = links.filter((link) => link.concept_ids.includes(marie)).map((link) => link.fact_id).sort();
  t.same(linkedToMarie, [source.factIds[0], source.factIds[1]].sort(), 'both facts about her link to her');
  t.ok(links.every((link) => source.factIds.includes(link.fact_id)), 'only facts of the source are linked');

  const head = await fixture.store.headPosition();
  await stage.run(fixture.contextFor(stage, source.trigger));
  t.equal(await fixture.store.headPosition(), head, 'a rerun appends nothing and calls no model');

  await fixture.settle();
  const row = await fixture.db.knex('concepts').where({ id: marie }).first('fact_count', 'status');
  t.match(row, { fact_count: 2, status: 'active' }, 'the read model counts her facts');
});

t.test('extract_concepts resolves candidates against existing concepts', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  await handleCommand(fixture.store, streamName('concept', marie), conceptDecider, {
    type: 'CreateConcept', canonicalName: 'Marie Curie', context: 'person', ontologyClass: 'person', aliases: ['Madame Curie'], sourceId: null,
  }, metadata);
  const old = conceptIdFor(repositoryId, 'Radium Institute', 'organization');
  const institute = conceptIdFor(repositoryId, 'Curie Institute', 'organization');
  for (const [id, name] of [[old, 'Radium Institute'], [institute, 'Curie Institute']]) {
    await handleCommand(fixture.store, streamName('concept', id), conceptDecider, {
      type: 'CreateConcept', canonicalName: name, context: 'organization', ontologyClass: null, aliases: [], sourceId: null,
    }, metadata);
  }
  await handleCommand(fixture.store, streamName('concept', old), conceptDecider, { type: 'MergeConcept', survivorId: institute, reason: 'renamed' }, metadata);
  const source = await deduplicatedSource(fixture, repositoryId, ['Madame Curie led the Radium Institute.']);
  const [factId] = source.factIds;
  const chat = scriptedChat(() => [
    // An alias of an existing concept, with a context spelled differently: that concept, plus the new alias.
    { canonicalName: 'Madame Curie', context: 'Person', aliases: ['M. Curie'], factIds: [factId] },
    // A concept merged meanwhile: its survivor.
    { canonicalName: 'Radium Institute', context: 'organization', aliases: ['Institut du Radium'], factIds: [factId] },
    // A context the repository does not allow, and facts outside the batch: dropped.
    { canonicalName: 'Starship', context: 'spaceship', aliases: [], factIds: [factId] },
    { canonicalName: 'Ghost', context: 'person', aliases: [], factIds: ['not-a-fact-of-the-batch'] },
    { canonicalName: '   ', context: 'person', aliases: [], factIds: [factId] },
  ]);
  const stage = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 10, concurrency: 1, maxAttempts: 3 });
  const before = (await fixture.eventsOfType('ConceptCreated')).length;
  await stage.run(fixture.contextFor(stage, source.trigger));
  t.equal((await fixture.eventsOfType('ConceptCreated')).length, before, 'no concept is created');
  t.same((await fixture.eventsOf(streamName('concept', marie), 'ConceptAliasAdded')).map((event) => event.data.alias), ['M. Curie']);
  t.same((await fixture.eventsOf(streamName('concept', institute), 'ConceptAliasAdded')).map((event) => event.data.alias).sort(), [
    'Institut du Radium',
    'Radium Institute',
  ], 'aliases land on the survivor');
  const [batch] = await fixture.eventsOf(streamName('source', source.sourceId), 'ConceptsExtracted');
  t.same(batch.data.links, [{ fact_id: factId, concept_ids: [marie, institute].sort() }]);
  t.equal(chat.calls.length, 1);
  t.same(chat.calls[0].facts, [{ id: factId, content: 'Madame Curie led the Radium Institute.' }]);
  t.ok(chat.calls[0].contexts.some((context) => context.name === 'person'), 'the repository contexts are offered');
  t.equal(chat.calls[0].promptset?.hash, effectivePromptset({}).hash);
});

t.test('extract_concepts on model failures', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const source = await deduplicatedSource(fixture, repositoryId, ['Alpha is a letter.', 'Beta is a letter.', 'Gamma is a letter.']);
  const candidate = (input: ConceptExtractionInput): ConceptCandidate[] =>
    input.facts.map((fact) => ({ canonicalName: fact.content.split(' ')[0], context: 'topic', aliases: [], factIds: [fact.id] }));
  const stream = streamName('source', source.sourceId);

  t.test('a transient failure is rethrown for a retry; finished batches stay recorded', async (t) => {
    const chat = scriptedChat((input, call) => (call === 2 ? new ModelCallError('rate limited', false, 429) : candidate(input)));
    const stage = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    const error = await stage.run(fixture.contextFor(stage, source.trigger, { attempts: 1 })).catch((caught: unknown) => caught);
    t.type(error, ModelCallError);
    t.notOk(error instanceof PermanentJobError, 'not permanent: the runtime retries it');
    t.same((await fixture.eventsOf(stream, 'ConceptsExtracted')).map((event) => event.data.batch_index), [0]);
    const retry = scriptedChat(candidate);
    const again = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: retry, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    await again.run(fixture.contextFor(again, source.trigger, { attempts: 2 }));
    t.equal(retry.calls.length, 1, 'the retry asks only for the missing batch');
    t.same((await fixture.eventsOf(stream, 'ConceptsExtracted')).map((event) => event.data.batch_index), [0, 1]);
  });

  t.test('a permanent failure, or a transient one on the last attempt, ends the job as permanent', async (t) => {
    const other = await deduplicatedSource(fixture, repositoryId, ['Delta is a letter.']);
    const permanent = scriptedChat(() => new ModelCallError('invalid api key', true, 401));
    const stage = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: permanent, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    await t.rejects(stage.run(fixture.contextFor(stage, other.trigger, { attempts: 1 })), PermanentJobError);
    const transient = scriptedChat(() => new ModelCallError('upstream 503', false, 503));
    const last = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: transient, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    await t.rejects(last.run(fixture.contextFor(last, other.trigger, { attempts: 3 })), PermanentJobError);
    t.same(await fixture.eventsOf(streamName('source', other.sourceId), 'ConceptsExtracted'), []);
  });

  t.test('a concept stream still contended after its retries fails the job for a retry, not as done by a twin', async (t) => {
    const metadata = testMetadata(repositoryId);
    const omega = conceptIdFor(repositoryId, 'Omega', 'topic');
    await handleCommand(fixture.store, streamName('concept', omega), conceptDecider, {
      type: 'CreateConcept', canonicalName: 'Omega', context: 'topic', ontologyClass: null, aliases: [], sourceId: null,
    }, metadata);
    const contested = await deduplicatedSource(fixture, repositoryId, ['Omega is the last letter.']);
    const chat = scriptedChat((input) => [{ canonicalName: 'Omega', context: 'topic', aliases: ['the last letter'], factIds: input.facts.map((fact) => fact.id) }]);
    let racer = 0;
    const store = racedStore(
      fixture.store,
      (streamId) => streamId === streamName('concept', omega),
      async (streamId) => {
        racer++;
        await handleCommand(fixture.store, streamId, conceptDecider, { type: 'AddAliases', aliases: [`Omega ${racer}`] }, metadata);
      },
    );
    const stage = createExtractConceptsStage({ store, knex: fixture.db.knex, chat, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    const error = await stage.run(fixture.contextFor(stage, contested.trigger, { attempts: 1 })).catch((caught: unknown) => caught);
    t.equal((error as Error).name, 'ContendedStreamError', `a retryable failure: ${String(error)}`);
    t.notOk(isConcurrencyError(error), 'not a ConcurrencyError, which the runtime would count as done');
    t.ok(store.races > 1, `the stage re-decided after each lost race (${store.races} races)`);
    const contestedStream = streamName('source', contested.sourceId);
    t.same(await fixture.eventsOf(contestedStream, 'ConceptsExtracted'), [], 'nothing recorded for the batch yet');
    const again = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 2, concurrency: 1, maxAttempts: 3 });
    await again.run(fixture.contextFor(again, contested.trigger, { attempts: 2 }));
    const [batch] = await fixture.eventsOf(contestedStream, 'ConceptsExtracted');
    t.same(batch?.data.links, [{ fact_id: contested.factIds[0], concept_ids: [omega] }], 'the retry links the fact');
  });

  t.test('bad settings are refused at construction', async (t) => {
    const chat = createLocalChatModel();
    t.throws(() => createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 0, concurrency: 1, maxAttempts: 3 }), RangeError);
    t.throws(() => createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 1, concurrency: 0, maxAttempts: 3 }), RangeError);
  });
});

t.test('refresh_concept_relations, migrate_context and refine_concepts', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const chat = createLocalChatModel();
  const extract = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 5, concurrency: 2, maxAttempts: 3 });
  const refresh = createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex });
  const source = await deduplicatedSource(fixture, repositoryId, [
    'Marie Curie discovered polonium in Paris.',
    'Marie Curie studied polonium with Pierre Curie.',
  ]);
  await extract.run(fixture.contextFor(extract, source.trigger));
  await fixture.settle();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const polonium = conceptIdFor(repositoryId, 'polonium', 'chemical');
  const repositoryStream = streamName('repository', repositoryId);

  t.test('relations: the changed pairs are recorded, then nothing until something changes', async (t) => {
    t.same(refresh.triggers, [], 'scheduled only');
    const expected = await relationChanges(fixture.db.knex, repositoryId);
    t.ok(expected.length > 0);
    const pair = [marie, polonium].sort();
    t.match(
      expected.find((change) => change.concept_a === pair[0] && change.concept_b === pair[1]),
      { shared_fact_count: 2 },
      'Marie Curie and polonium share both facts',
    );
    t.ok(expected.every((change) => change.concept_a < change.concept_b), 'pairs are ordered');
    await refresh.run(fixture.scheduledContextFor(refresh, repositoryId));
    const refreshed = await fixture.eventsOf(repositoryStream, 'ConceptRelationsRefreshed');
    t.equal(refreshed.length, 1);
    t.same(refreshed[0].data.changes, expected);
    await fixture.settle();
    const head = await fixture.store.headPosition();
    await refresh.run(fixture.scheduledContextFor(refresh, repositoryId));
    t.equal(await fixture.store.headPosition(), head, 'unchanged: nothing recorded');
  });

  t.test('relations: computed a window of concepts at a time, recorded in events of bounded size', async (t) => {
    t.throws(() => createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex, windowConcepts: 0 }), RangeError);
    t.throws(() => createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex, changesPerEvent: 1.5 }), RangeError);
    // A repository of its own, so the subtests after this one see the first repository as it was.
    const own = await fixture.createRepository();
    const ownStream = streamName('repository', own);
    const more = await deduplicatedSource(fixture, own, [
      'Pierre Curie and Marie Curie shared the Nobel Prize in Physics with Henri Becquerel.',
      'Henri Becquerel discovered radioactivity in uranium salts in Paris.',
      'Marie Curie discovered radium with Pierre Curie in Paris.',
    ]);
    await extract.run(fixture.contextFor(extract, more.trigger));
    await fixture.settle();
    const expected = await relationChanges(fixture.db.knex, own);
    t.ok(expected.length > 4, `several pairs changed (${expected.length})`);
    t.same(await relationChanges(fixture.db.knex, own, 1), expected, 'the same changes, one concept a statement');
    const head = await fixture.store.headPosition();
    const windowed = createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex, windowConcepts: 2, changesPerEvent: 2 });
    await windowed.run(fixture.scheduledContextFor(windowed, own));
    const recorded = (await fixture.eventsOf(ownStream, 'ConceptRelationsRefreshed')).filter((event) => event.globalPosition > head);
    t.equal(recorded.length, Math.ceil(expected.length / 2), 'two changes an event');
    t.same(recorded.flatMap((event) => event.data.changes), expected, 'in pair order, none lost or repeated');
    await fixture.settle();
    t.same(await relationChanges(fixture.db.knex, own), [], 'the read model holds every pair now');
    const stored = await fixture.db.knex('concept_relations').where({ repository_id: own }).where('shared_fact_count', '>', 0).count({ n: '*' });
    t.ok(Number(stored[0].n) >= expected.filter((change) => change.shared_fact_count > 0).length);
    const after = await fixture.store.headPosition();
    await windowed.run(fixture.scheduledContextFor(windowed, own));
    t.equal(await fixture.store.headPosition(), after, 'a rerun records nothing');
  });

  t.test('migrate_context moves every concept of a context and is idempotent', async (t) => {
    await handleCommand(fixture.store, repositoryStream, repositoryDecider, {
      type: 'SetCustomContexts',
      customContexts: [{ name: 'scientist', description: 'A person known for research.' }],
    }, metadata);
    await handleCommand(fixture.store, repositoryStream, repositoryDecider, { type: 'RequestContextMigration', fromContext: 'person', toContext: 'scientist' }, metadata);
    const requested = await fixture.last(repositoryStream, 'ContextMigrationRequested');
    await fixture.settle();
    const stage = createMigrateContextStage({ store: fixture.store, knex: fixture.db.knex, locks: namedLocks(fixture.db) });
    t.equal(stage.subjectOf(requested), repositoryId);
    const people = (await fixture.db.knex('concepts').where({ repository_id: repositoryId, context: 'person', status: 'active' }).pluck('id')) as string[];
    t.ok(people.includes(marie));
    await stage.run(fixture.contextFor(stage, requested));
    for (const id of people) {
      const merged = await fixture.last(streamName('concept', id), 'ConceptMergedInto');
      t.match(merged.data, { reason: 'context migrated from person to scientist' });
    }
    const moved = conceptIdFor(repositoryId, 'Marie Curie', 'scientist');
    t.match((await fixture.last(streamName('concept', marie), 'ConceptMergedInto')).data, { survivor_id: moved });
    t.match((await fixture.last(streamName('concept', moved), 'ConceptCreated')).data, { canonical_name: 'Marie Curie', context: 'scientist', source_id: null });
    await fixture.settle();
    const head = await fixture.store.headPosition();
    await stage.run(fixture.contextFor(stage, requested));
    t.equal(await fixture.store.headPosition(), head, 'a rerun finds nothing left to move');
    t.match(await fixture.db.knex('concepts').where({ id: moved }).first('fact_count', 'status'), { fact_count: 2, status: 'active' }, 'her facts moved along');

    // The merges carried the relations over as they were applied: the periodic refresh has nothing left to do.
    const relations = () => fixture.db.knex('concept_relations').where({ repository_id: repositoryId });
    const [a, b] = [moved, polonium].sort();
    t.match(await relations().where({ concept_a: a, concept_b: b }).first('shared_fact_count'), { shared_fact_count: 2 }, 'the new pairs are there');
    t.same(await relations().where((pair) => pair.where({ concept_a: marie }).orWhere({ concept_b: marie })).pluck('concept_b'), [], 'the old ones are gone');
    const refreshedBefore = await fixture.last(repositoryStream, 'ConceptRelationsRefreshed');
    await refresh.run(fixture.scheduledContextFor(refresh, repositoryId));
    t.equal((await fixture.last(repositoryStream, 'ConceptRelationsRefreshed')).globalPosition, refreshedBefore.globalPosition, 'a refresh then records nothing');

    // The target context is withdrawn before the job runs: a permanent failure.
    await handleCommand(fixture.store, repositoryStream, repositoryDecider, { type: 'SetCustomContexts', customContexts: [] }, metadata);
    await fixture.settle();
    await t.rejects(stage.run(fixture.contextFor(stage, requested)), PermanentJobError);
    const malformed: RecordedEvent = { ...requested, data: { from_context: '', to_context: 'person' } };
    await t.rejects(stage.run(fixture.contextFor(stage, malformed)), PermanentJobError);
  });

  t.test('migrations of one repository run one at a time: A → B beside B → A leaves every concept in one context', async (t) => {
    const names = { chemical: ['Radium', 'Actinium'], technology: ['Geiger counter', 'Electrometer'] };
    const ids: string[] = [];
    for (const [context, canonicalNames] of Object.entries(names)) {
      for (const canonicalName of canonicalNames) {
        const id = conceptIdFor(repositoryId, canonicalName, context);
        ids.push(id);
        await handleCommand(fixture.store, streamName('concept', id), conceptDecider, { type: 'CreateConcept', canonicalName, context, ontologyClass: null, aliases: [], sourceId: null }, metadata);
      }
    }
    const request = async (fromContext: string, toContext: string) => {
      await handleCommand(fixture.store, repositoryStream, repositoryDecider, { type: 'RequestContextMigration', fromContext, toContext }, metadata);
      return fixture.last(repositoryStream, 'ContextMigrationRequested');
    };
    const forth = await request('chemical', 'technology');
    const back = await request('technology', 'chemical');
    await fixture.settle();
    const stage = createMigrateContextStage({ store: fixture.store, knex: fixture.db.knex, locks: namedLocks(fixture.db) });
    await Promise.all([stage.run(fixture.contextFor(stage, forth)), stage.run(fixture.contextFor(stage, back))]);
    await fixture.settle();
    const contexts = await fixture.db.knex('concepts')
      .where({ repository_id: repositoryId, status: 'active' })
      .whereIn('canonical_name', Object.values(names).flat())
      .pluck('context');
    t.equal(contexts.length, 4, 'each concept once');
    t.equal(new Set(contexts).size, 1, `all in one context, as one migration after the other leaves them (${contexts.join(', ')})`);
  });

  t.test('refine_concepts merges names that differ only in number and prunes alias-laden concepts', async (t) => {
    const ids: Record<string, string> = {};
    for (const [name, aliases] of [
      ['X-ray', []],
      ['X-rays', []],
      ['Laser', ['ab', 'cd', 'ef', 'gh', 'ij', 'Light amplification']],
    ] as Array<[string, string[]]>) {
      ids[name] = conceptIdFor(repositoryId, name, 'technology');
      await handleCommand(fixture.store, streamName('concept', ids[name]), conceptDecider, {
        type: 'CreateConcept', canonicalName: name, context: 'technology', ontologyClass: null, aliases, sourceId: null,
      }, metadata);
    }
    await fixture.settle();
    const stage = createRefineConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, maxCandidates: 40, pruneThreshold: 5, maxConcurrency: 2 });
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    const merges = [
      ...(await fixture.eventsOf(streamName('concept', ids['X-ray']), 'ConceptMergedInto')),
      ...(await fixture.eventsOf(streamName('concept', ids['X-rays']), 'ConceptMergedInto')),
    ];
    t.equal(merges.length, 1, 'one of the pair merges into the other');
    t.ok([ids['X-ray'], ids['X-rays']].includes(merges[0].data.survivor_id as string));
    const removed = (await fixture.eventsOf(streamName('concept', ids.Laser), 'ConceptAliasRemoved')).map((event) => event.data.alias).sort();
    t.same(removed, ['ab', 'cd', 'ef', 'gh', 'ij'], 'short aliases pruned, the meaningful one kept');
    await fixture.settle();
    const head = await fixture.store.headPosition();
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    const after = await fixture.eventsOfType(...conceptTypes);
    t.equal(after.filter((event) => event.globalPosition > head).length, 0, 'a second run decides nothing new');
  });
});

t.test('scheduled runs for a repository deleted after enqueueing do nothing', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  await handleCommand(fixture.store, streamName('repository', repositoryId), repositoryDecider, { type: 'DeleteRepository' }, testMetadata(repositoryId));
  await fixture.settle();
  const head = await fixture.store.headPosition();
  const refresh = createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex });
  const refine = createRefineConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), maxCandidates: 40, pruneThreshold: 5, maxConcurrency: 1 });
  await refresh.run(fixture.scheduledContextFor(refresh, repositoryId));
  await refine.run(fixture.scheduledContextFor(refine, repositoryId));
  t.equal(await fixture.store.headPosition(), head);
});

t.test('refresh_concept_relations raced by a merge: what it read of the merged concept is not written back', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const extract = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), batchSize: 5, concurrency: 1, maxAttempts: 3 });
  const source = await deduplicatedSource(fixture, repositoryId, ['Marie Curie discovered polonium in Paris.', 'Marie Curie studied polonium with Pierre Curie.']);
  await extract.run(fixture.contextFor(extract, source.trigger));
  await fixture.settle();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const polonium = conceptIdFor(repositoryId, 'polonium', 'chemical');
  const survivor = conceptIdFor(repositoryId, 'Maria Sklodowska-Curie', 'person');
  await handleCommand(fixture.store, streamName('concept', survivor), conceptDecider, {
    type: 'CreateConcept', canonicalName: 'Maria Sklodowska-Curie', context: 'person', ontologyClass: null, aliases: [], sourceId: null,
  }, metadata);
  await fixture.settle();
  const repositoryStream = streamName('repository', repositoryId);
  // The refresh has read the read models (Marie Curie still active, with her pairs) when, before
  // it appends, her merge is recorded and applied.
  const store = racedStore(
    fixture.store,
    (streamId) => streamId === repositoryStream,
    async () => {
      await handleCommand(fixture.store, streamName('concept', marie), conceptDecider, { type: 'MergeConcept', survivorId: survivor, reason: 'same person' }, metadata);
      await fixture.settle();
    },
    1,
  );
  const refresh = createRefreshConceptRelationsStage({ store, knex: fixture.db.knex });
  await refresh.run(fixture.scheduledContextFor(refresh, repositoryId));
  t.equal(store.races, 1, 'the merge came between the refresh reading and appending');
  const recorded = (await fixture.last(repositoryStream, 'ConceptRelationsRefreshed')).data.changes as Array<{ concept_a: string; concept_b: string; shared_fact_count: number }>;
  t.ok(recorded.some((change) => [change.concept_a, change.concept_b].includes(marie) && change.shared_fact_count > 0), 'the refresh recorded pairs of the merged concept');
  await fixture.settle();

  const relations = () => fixture.db.knex('concept_relations').where({ repository_id: repositoryId });
  t.same(await relations().where((pair) => pair.where({ concept_a: marie }).orWhere({ concept_b: marie })).select('concept_a', 'concept_b'), [], 'no row names the merged concept');
  const [a, b] = [survivor, polonium].sort();
  t.match(await relations().where({ concept_a: a, concept_b: b }).first('shared_fact_count'), { shared_fact_count: 2 }, "the survivor holds her pairs, as the merge counted them");
  t.same(await relationChanges(fixture.db.knex, repositoryId), [], 'the next periodic refresh changes nothing');
});
