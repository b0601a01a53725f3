import { randomUUID } from 'node:crypto';
import t from 'tap';
import { factDecider } from '../../../src/domain/fact/decider.js';
import { sourceDecider } from '../../../src/domain/source/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import { createCleanupFactsStage } from '../../../src/pipeline/stages/cleanupFacts.js';
import { CATCH_UP_INDEX_LAG_MARGIN_MS, createDeduplicateFactsStage, finalFact, slicesBySource } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { createPostgresSearchIndex } from '../../../src/search/postgres.js';
import { contentHash } from '../../../src/interchange/hashing.js';
import { factIdFor } from '../../../src/pipeline/stages/sourceDecomposition.js';
import { withOverrides } from '../../eventstore/contract.js';
import { axisVector, openStageFixture, TEST_MODEL, testMetadata } from '../stageFixture.js';

t.setTimeout(300_000);

const DIMS = 100;
const HOUR = 3_600_000;

t.test('deduplicate_facts and cleanup_facts on an embedded pipeline', async (t) => {
  const fixture = await openStageFixture(t, { dimensions: DIMS });
  const { store, db } = fixture;
  const stage = createDeduplicateFactsStage({
    store,
    knex: db.knex,
    search: fixture.search,
    embedderModelId: TEST_MODEL,
    threshold: 0.94,
    catchupMaxAgeMs: 168 * HOUR,
  });
  const cleanup = createCleanupFactsStage({ store, knex: db.knex });
  const repositoryId = await fixture.createRepository();

  /** A processed, embedded source; returns the FactsEmbedded trigger and fact ids. */
  async function embeddedSource(contents: string[], vectors: number[][]) {
    const source = await fixture.addSource(repositoryId, contents);
    const embedded = await fixture.embedSource(repositoryId, source.sourceId, new Map(source.factIds.map((id, index) => [id, vectors[index]])));
    await fixture.settle();
    return { ...source, embedded };
  }

  async function factEvents(factId: string) {
    return (await fixture.eventsOf(streamName('fact', factId))).map((event) => ({ type: event.type, data: event.data }));
  }

  t.equal(stage.kind, 'deduplicate_facts');
  t.same(stage.triggers, ['FactsEmbedded'], 'with an embedder it follows embed_facts');

  let stableOne = '';
  t.test('distinct facts are stabilized; a rerun records nothing', async (t) => {
    const source = await embeddedSource(['Tides follow the moon.', 'Trade winds blow westward.'], [axisVector(DIMS, 0), axisVector(DIMS, 10)]);
    const context = fixture.contextFor(stage, source.embedded);
    t.equal(context.job.subjectId, source.sourceId);
    await stage.run(context);
    for (const factId of source.factIds) {
      t.same(await factEvents(factId), [{ type: 'FactStabilized', data: { source_id: source.sourceId } }]);
    }
    const done = await fixture.eventsOf(streamName('source', source.sourceId), 'SourceFactsDeduplicated');
    t.equal(done.length, 1);
    t.same(done[0].data, { stable_fact_ids: [...source.factIds].sort(), merged: [] });
    t.equal(done[0].causationId, source.embedded.eventId, 'caused by the trigger');
    t.equal(done[0].actor, 'system:deduplicate_facts');
    const head = await store.headPosition();
    await stage.run(fixture.contextFor(stage, source.embedded));
    t.equal(await store.headPosition(), head, 'idempotent: the second run appends nothing');
    await fixture.settle();
    const rows = await db.knex('facts').whereIn('id', source.factIds).select('status');
    t.same(rows.map((row) => row.status), ['stable', 'stable'], 'the read model shows them stable');
    stableOne = source.factIds[0];
  });

  t.test('a new fact near a stable one merges into it; cleanup removes it once', async (t) => {
    const source = await embeddedSource(['The tides follow the moon.'], [axisVector(DIMS, 0, 0.1)]);
    await stage.run(fixture.contextFor(stage, source.embedded));
    const [loser] = source.factIds;
    const events = await fixture.eventsOf(streamName('fact', loser));
    t.equal(events.length, 1);
    t.match(events[0], { type: 'FactMergedInto', data: { survivor_id: stableOne, source_id: source.sourceId, catchup: false } });
    t.ok(Math.abs((events[0].data.similarity as number) - Math.cos(0.1)) < 1e-4, 'the cosine similarity is recorded');
    t.same((await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated')).data, {
      stable_fact_ids: [],
      merged: [{ fact_id: loser, survivor_id: stableOne }],
    });
    t.same(cleanup.triggers, ['FactMergedInto', 'SourceDeleted']);
    t.equal(cleanup.subjectOf(events[0]), loser);
    t.equal(cleanup.sourceOf?.(events[0]), source.sourceId, 'the cleanup job counts for the merging source');
    await cleanup.run(fixture.contextFor(cleanup, events[0]));
    await cleanup.run(fixture.contextFor(cleanup, events[0]));
    t.same((await factEvents(loser)).map((event) => event.type), ['FactMergedInto', 'FactRemoved'], 'removed once');
    t.same((await fixture.last(streamName('fact', loser), 'FactRemoved')).data, { survivor_id: stableOne });
    await fixture.settle();
    t.equal(await db.knex('facts').where({ id: loser }).first(), undefined, 'the removed fact loses its row');
    t.same(await finalFact(store, loser), { id: stableOne, status: 'stable' }, 'the chain ends at the survivor');
  });

  t.test('cleanup leaves a fact that was never merged alone', async (t) => {
    const head = await store.headPosition();
    const trigger = (await fixture.eventsOf(streamName('fact', stableOne)))[0];
    await cleanup.run(fixture.contextFor(cleanup, { ...trigger, type: 'FactMergedInto' }));
    t.equal(await store.headPosition(), head);
  });

  t.test('two new near-duplicates in one source: the larger id merges into the smaller', async (t) => {
    const source = await embeddedSource(['Mount Everest is 8849 m high.', 'Mount Everest is 8,849 metres high.'], [axisVector(DIMS, 20), axisVector(DIMS, 20, 0.05)]);
    await stage.run(fixture.contextFor(stage, source.embedded));
    const [small, large] = [...source.factIds].sort();
    t.same((await factEvents(small)).map((event) => event.type), ['FactStabilized']);
    t.match((await factEvents(large))[0], { type: 'FactMergedInto', data: { survivor_id: small } });
  });

  t.test('new facts of two sources: whichever job runs first, one cluster with the smaller id surviving', async (t) => {
    const first = await fixture.addSource(repositoryId, ['Water boils at 100 °C at sea level.']);
    const second = await fixture.addSource(repositoryId, ['At sea level, water boils at 100 °C.']);
    const firstEmbedded = await fixture.embedSource(repositoryId, first.sourceId, new Map([[first.factIds[0], axisVector(DIMS, 30)]]));
    const secondEmbedded = await fixture.embedSource(repositoryId, second.sourceId, new Map([[second.factIds[0], axisVector(DIMS, 30, 0.08)]]));
    await fixture.settle();
    // The second source's job runs first, while the first source's fact is still new.
    await stage.run(fixture.contextFor(stage, secondEmbedded));
    await fixture.settle();
    await stage.run(fixture.contextFor(stage, firstEmbedded));
    const [small, large] = [first.factIds[0], second.factIds[0]].sort();
    t.same((await factEvents(small)).map((event) => event.type), ['FactStabilized'], 'the smaller id survives');
    t.match((await factEvents(large))[0], { type: 'FactMergedInto', data: { survivor_id: small } });
  });

  t.test('twin jobs racing a neighbour: a merge decided on a stale read does not undo a twin\'s stabilization (no cycle)', async (t) => {
    // Two near-duplicate sentences; the one with the larger id is in two sources (twins).
    const [smallContent, largeContent] = ['Marie Curie won the Nobel Prize in Chemistry in 1911.', 'In 1911, Marie Curie won the Nobel Prize in Chemistry.']
      .map((content) => ({ content, id: factIdFor(repositoryId, contentHash(content)) }))
      .sort((a, b) => (a.id < b.id ? -1 : 1))
      .map((fact) => fact.content);
    const twinA = await fixture.addSource(repositoryId, [largeContent]);
    const twinB = await fixture.addSource(repositoryId, [largeContent]);
    const neighbour = await fixture.addSource(repositoryId, [smallContent]);
    const [large, small] = [twinA.factIds[0], neighbour.factIds[0]];
    const vector = (source: { factIds: string[] }, wobble: number) => new Map([[source.factIds[0], axisVector(DIMS, 80, wobble)]]);
    const embeddedA = await fixture.embedSource(repositoryId, twinA.sourceId, vector(twinA, 0));
    const embeddedB = await fixture.embedSource(repositoryId, twinB.sourceId, vector(twinB, 0));
    await fixture.settle();

    // A job that stops before its decisions are appended, until released.
    const paused = () => {
      let reached!: () => void;
      let release!: () => void;
      const atAppend = new Promise<void>((resolve) => (reached = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      const store = withOverrides(fixture.store, {
        async appendToStreams(appends: Parameters<typeof fixture.store.appendToStreams>[0]) {
          reached();
          await released;
          return fixture.store.appendToStreams(appends);
        },
      });
      const job = createDeduplicateFactsStage({ store, knex: db.knex, search: fixture.search, embedderModelId: TEST_MODEL, threshold: 0.94, catchupMaxAgeMs: 168 * HOUR });
      return { job, atAppend, release };
    };
    // Twin B reads while the neighbour is not indexed yet: it will stabilize the shared fact.
    const jobB = paused();
    const runB = jobB.job.run(fixture.contextFor(jobB.job, embeddedB));
    await jobB.atAppend;
    const embeddedNeighbour = await fixture.embedSource(repositoryId, neighbour.sourceId, vector(neighbour, 0.05));
    await fixture.settle();
    // Twin A reads now: the shared fact is new and the neighbour is new with a smaller id, so it decides to merge.
    const jobA = paused();
    const runA = jobA.job.run(fixture.contextFor(jobA.job, embeddedA));
    await jobA.atAppend;
    jobB.release();
    await runB;
    await fixture.settle();
    // The neighbour's job sees the shared fact stable and merges into it.
    await stage.run(fixture.contextFor(stage, embeddedNeighbour));
    // A's append meets a moved stream: its merge, decided on a stale read, records nothing.
    jobA.release();
    await runA;
    t.same((await factEvents(large)).map((event) => event.type), ['FactStabilized'], 'the twin\'s stabilization stands');
    t.match(await factEvents(small), [{ type: 'FactMergedInto', data: { survivor_id: large } }], 'the neighbour merged into it');
    t.same(await finalFact(store, small), { id: large, status: 'stable' }, 'the cluster has a survivor');
  });

  t.test('a neighbour below the threshold does not merge', async (t) => {
    const source = await embeddedSource(['Cats purr when content.'], [axisVector(DIMS, 0, 0.5)]);
    await stage.run(fixture.contextFor(stage, source.embedded));
    t.same((await factEvents(source.factIds[0])).map((event) => event.type), ['FactStabilized'], 'cos(0.5) = 0.88 < 0.94');
  });

  t.test('catch-up merges a stable pair that raced, the larger id into the smaller, once', async (t) => {
    const first = await fixture.addSource(repositoryId, ['Light travels at 299,792 km/s.']);
    const second = await fixture.addSource(repositoryId, ['Light travels at 299792 km per second.']);
    await fixture.embedSource(repositoryId, first.sourceId, new Map([[first.factIds[0], axisVector(DIMS, 40)]]));
    await fixture.embedSource(repositoryId, second.sourceId, new Map([[second.factIds[0], axisVector(DIMS, 40, 0.03)]]));
    // Both jobs decided before the other's vectors were indexed: both facts stable.
    for (const source of [first, second]) {
      const metadata = testMetadata(repositoryId);
      await handleCommand(store, streamName('fact', source.factIds[0]), factDecider, { type: 'StabilizeFact', sourceId: source.sourceId }, metadata);
      await handleCommand(store, streamName('source', source.sourceId), sourceDecider, { type: 'RecordDeduplication', stableFactIds: source.factIds, merged: [] }, metadata);
    }
    await fixture.settle();
    const catchUp = fixture.scheduledContextFor(stage, repositoryId);
    await stage.run(catchUp);
    const [small, large] = [first.factIds[0], second.factIds[0]].sort();
    t.same((await factEvents(small)).map((event) => event.type), ['FactStabilized']);
    const merged = await fixture.last(streamName('fact', large), 'FactMergedInto');
    t.match(merged.data, { survivor_id: small, source_id: null, catchup: true });
    t.equal(merged.causationId, null, 'a scheduled run has no causing event');
    await fixture.settle();
    const head = await store.headPosition();
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    t.equal(await store.headPosition(), head, 'a second catch-up finds nothing to repair');
  });

  t.test('catch-up looks only at facts stable since shortly before its previous pass', async (t) => {
    const first = await fixture.addSource(repositoryId, ['Sound travels at 343 m/s in air.']);
    const second = await fixture.addSource(repositoryId, ['Sound travels at 343 metres per second in air.']);
    await fixture.embedSource(repositoryId, first.sourceId, new Map([[first.factIds[0], axisVector(DIMS, 60)]]));
    await fixture.embedSource(repositoryId, second.sourceId, new Map([[second.factIds[0], axisVector(DIMS, 60, 0.02)]]));
    for (const source of [first, second]) {
      await handleCommand(store, streamName('fact', source.factIds[0]), factDecider, { type: 'StabilizeFact', sourceId: source.sourceId }, testMetadata(repositoryId));
    }
    await fixture.settle();
    // Given an earlier pass that was enqueued after both stabilized, with the index-lag margin to spare.
    const earlierPass = randomUUID();
    await db.knex('jobs').insert({
      id: earlierPass,
      kind: 'deduplicate_facts',
      repository_id: repositoryId,
      subject_id: repositoryId,
      trigger_event_id: randomUUID(),
      trigger_position: 0,
      state: 'succeeded',
      created_at: new Date(Date.now() + CATCH_UP_INDEX_LAG_MARGIN_MS + 60_000),
    });
    const head = await store.headPosition();
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    t.equal(await store.headPosition(), head, 'the earlier pass covered them: nothing is compared again');

    // Without that pass, the same pair is in the window and gets repaired.
    await db.knex('jobs').where({ id: earlierPass }).delete();
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    const large = [first.factIds[0], second.factIds[0]].sort()[1];
    t.ok(await fixture.last(streamName('fact', large), 'FactMergedInto'), 'the pair raced and is merged now');
  });

  t.test('catch-up reads each source once a pass, its vectors without the facts\' text', async (t) => {
    // A repository of three sources of three stable facts, fact ids interleaved across them; steps of about 3 facts.
    const repositoryId = await fixture.createRepository();
    const sources = [];
    for (const [index, axis] of [70, 75, 80].entries()) {
      const source = await fixture.addSource(repositoryId, [1, 2, 3].map((n) => `Read-once fact ${n} of source ${index}.`));
      await fixture.embedSource(repositoryId, source.sourceId, new Map(source.factIds.map((id, n) => [id, axisVector(DIMS, axis + n)])));
      for (const factId of source.factIds) {
        await handleCommand(store, streamName('fact', factId), factDecider, { type: 'StabilizeFact', sourceId: source.sourceId }, testMetadata(repositoryId));
      }
      sources.push(source);
    }
    await fixture.settle();
    const read: string[] = [];
    const readEvents: Array<{ type: string; data: Record<string, unknown> }> = [];
    const recording = withOverrides(store, {
      async readStreams(streamIds: readonly string[], options?: Parameters<typeof store.readStreams>[1]) {
        const result = await store.readStreams(streamIds, options);
        for (const [streamId, events] of result) {
          if (!streamId.startsWith('source-')) continue;
          read.push(streamId);
          readEvents.push(...events.map((event) => ({ type: event.type, data: event.data })));
        }
        return result;
      },
    });
    const stepwise = createDeduplicateFactsStage({ store: recording, knex: db.knex, search: fixture.search, embedderModelId: TEST_MODEL, threshold: 0.94, catchupMaxAgeMs: 168 * HOUR, catchUpSlice: 3 });
    await stepwise.run(fixture.scheduledContextFor(stepwise, repositoryId));
    for (const source of sources) t.equal(read.filter((id) => id === streamName('source', source.sourceId)).length, 1, `source ${source.sourceId} read once`);
    t.same(read.filter((id, index) => read.indexOf(id) !== index), [], 'no source read twice');
    t.ok(readEvents.some((event) => event.type === 'FactsEmbedded' && Array.isArray(event.data.vectors)), 'the vectors are read');
    t.notOk(readEvents.some((event) => event.type === 'FactsExtracted' && 'facts' in event.data), 'the facts\' text is not');
  });

  t.test('catch-up ignores facts older than catchup_max_age', async (t) => {
    const narrow = createDeduplicateFactsStage({
      store,
      knex: db.knex,
      search: fixture.search,
      embedderModelId: TEST_MODEL,
      threshold: 0.94,
      catchupMaxAgeMs: 1,
    });
    const first = await fixture.addSource(repositoryId, ['Old fact one.']);
    const second = await fixture.addSource(repositoryId, ['Old fact one, again.']);
    await fixture.embedSource(repositoryId, first.sourceId, new Map([[first.factIds[0], axisVector(DIMS, 50)]]));
    await fixture.embedSource(repositoryId, second.sourceId, new Map([[second.factIds[0], axisVector(DIMS, 50, 0.01)]]));
    for (const source of [first, second]) {
      await handleCommand(store, streamName('fact', source.factIds[0]), factDecider, { type: 'StabilizeFact', sourceId: source.sourceId }, testMetadata(repositoryId));
    }
    await fixture.settle();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const head = await store.headPosition();
    await narrow.run(fixture.scheduledContextFor(narrow, repositoryId));
    t.equal(await store.headPosition(), head);
  });

  t.test('an aborted job stops before deciding', async (t) => {
    const source = await embeddedSource(['Abort me.'], [axisVector(DIMS, 60)]);
    const controller = new AbortController();
    controller.abort(new Error('worker shutting down'));
    await t.rejects(stage.run(fixture.contextFor(stage, source.embedded, { signal: controller.signal })), /worker shutting down/);
    t.same(await factEvents(source.factIds[0]), []);
  });
});

t.test('the catch-up\'s slices hold whole sources, in source order', async (t) => {
  const sourcesOf = new Map<string, string[]>([
    ['f1', ['sB']],
    ['f2', ['sA']],
    ['f3', ['sA', 'sB']],
    ['f4', ['sC']],
    ['f5', []],
    ['f6', ['sA']],
  ]);
  t.same(slicesBySource(sourcesOf, 3), [['f2', 'f3', 'f6'], ['f1', 'f4']], 'by first source (sA: f2, f3, f6), never split; no source, left out');
  t.same(slicesBySource(sourcesOf, 4), [['f2', 'f3', 'f6', 'f1'], ['f4']]);
  t.same(slicesBySource(sourcesOf, 1), [['f2', 'f3', 'f6'], ['f1'], ['f4']], 'a source larger than a step is one step');
  t.same(slicesBySource(new Map(), 200), []);
});

t.test('deduplicate_facts without vector search stabilizes every new fact', async (t) => {
  const fixture = await openStageFixture(t, { dimensions: DIMS });
  const repositoryId = await fixture.createRepository();

  t.test('no embedder: triggered by FactsExtracted, content hash is the only deduplication', async (t) => {
    const stage = createDeduplicateFactsStage({
      store: fixture.store,
      knex: fixture.db.knex,
      search: fixture.search,
      embedderModelId: null,
      threshold: 0.94,
      catchupMaxAgeMs: HOUR,
    });
    t.same(stage.triggers, ['FactsExtracted']);
    const source = await fixture.addSource(repositoryId, ['Same words.', 'Same words!']);
    await stage.run(fixture.contextFor(stage, source.extracted));
    const done = await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated');
    t.same(done.data, { stable_fact_ids: [...source.factIds].sort(), merged: [] });
    // The same text in a second source is the same fact: already stable, listed as such.
    const again = await fixture.addSource(repositoryId, ['Same words.']);
    t.equal(again.factIds[0], source.factIds[0], 'equal content_hash, one fact id');
    await stage.run(fixture.contextFor(stage, again.extracted));
    t.same((await fixture.last(streamName('source', again.sourceId), 'SourceFactsDeduplicated')).data, {
      stable_fact_ids: [again.factIds[0]],
      merged: [],
    });
    t.equal((await fixture.eventsOf(streamName('fact', again.factIds[0]))).length, 1, 'stabilized once');
    const head = await fixture.store.headPosition();
    await stage.run(fixture.scheduledContextFor(stage, repositoryId));
    t.equal(await fixture.store.headPosition(), head, 'catch-up has nothing to compare');
  });

  t.test('an index without vectors: near-duplicates are kept apart, nothing fails', async (t) => {
    const stage = createDeduplicateFactsStage({
      store: fixture.store,
      knex: fixture.db.knex,
      search: createPostgresSearchIndex(fixture.db.knex, { hasVector: false }),
      embedderModelId: TEST_MODEL,
      threshold: 0.94,
      catchupMaxAgeMs: HOUR,
    });
    const source = await fixture.addSource(repositoryId, ['Near one.', 'Near one, too.']);
    const embedded = await fixture.embedSource(
      repositoryId,
      source.sourceId,
      new Map([
        [source.factIds[0], axisVector(DIMS, 5)],
        [source.factIds[1], axisVector(DIMS, 5, 0.01)],
      ]),
    );
    await stage.run(fixture.contextFor(stage, embedded));
    t.same((await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated')).data.stable_fact_ids, [...source.factIds].sort());
  });
});
