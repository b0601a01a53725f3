import t from 'tap';
import { streamName } from '../../src/eventstore/envelope.js';
import { eventually, registerUser, startTestService } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

t.setTimeout(300_000);

/**
 * The whole pipeline as wired in src/app/context.ts, on the embedded tier with the local chat
 * model and the local embedder: a registered URL goes through fetch, decomposition, embedding,
 * deduplication and concept extraction; the scheduler then refreshes concept relations.
 */
t.test('a source runs through every stage, and scheduled relation refreshes follow', async (t) => {
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE } });
  const service = await startTestService({ overrides: { task: { refresh_concept_relations_interval: '1s' } } });
  t.teardown(async () => {
    await service.close();
    await web.close();
  });
  const { context } = service;
  t.ok(context.embedder, 'the default config embeds locally');
  t.equal(context.chat.modelId, 'local/rule-based-v1');
  t.ok(context.hybrid, 'hybrid search is wired');

  const user = await registerUser(service, 'pipeline@example.org');
  const repo = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Pipeline' } })).body;
  const source = (await service.call('POST', `/api/v1/repositories/${repo.id}/sources`, { token: user.token, body: { url: `${web.baseUrl}/curie` } })).body;
  const stream = streamName('source', source.id);

  const batches = await eventually(async () => {
    const events = await context.store.readStream(stream);
    const extracted = events.filter((event) => event.type === 'ConceptsExtracted');
    const count = extracted[0]?.data.batch_count as number | undefined;
    return count !== undefined && extracted.length === count ? extracted : null;
  }, 120_000);
  const types = (await context.store.readStream(stream)).map((event) => event.type);
  t.same(
    [...new Set(types)],
    ['SourceRegistered', 'SourceFetchStarted', 'SourceFetched', 'SourceDecompositionStarted', 'FactsExtracted', 'FactsEmbedded', 'SourceFactsDeduplicated', 'ConceptsExtracted'],
    'each stage recorded its result on the source, in pipeline order',
  );
  t.ok(batches.length >= 1);

  await eventually(async () => (await service.call('GET', `/api/v1/repositories/${repo.id}/tasks?source_id=${source.id}&limit=1`, { token: user.token })).body.complete, 60_000);
  const counts = await context.jobs.countsFor({ repositoryId: repo.id, sourceId: source.id });
  for (const kind of ['retrieve_source', 'source_decomposition', 'embed_facts', 'deduplicate_facts', 'extract_concepts', 'embed_concepts']) {
    t.ok((counts[kind]?.succeeded ?? 0) >= 1, `${kind} ran for the source`);
    t.equal(counts[kind]?.failed ?? 0, 0, `${kind} never failed`);
  }
  const newFacts = await context.db.knex('facts').where({ repository_id: repo.id, status: 'new' }).count<{ n: number }[]>('* as n');
  t.equal(Number(newFacts[0].n), 0, 'every fact was deduplicated');
  const concepts = await context.db.knex('concepts').where({ repository_id: repo.id, status: 'active' }).select('id', 'embedding_model');
  t.ok(concepts.length > 0, 'concepts were extracted');
  await eventually(async () => {
    const rows = await context.db.knex('concepts').where({ repository_id: repo.id, status: 'active' }).whereNull('embedding_model').first('id');
    return rows === undefined ? true : null;
  }, 60_000);

  const refreshed = await eventually(async () => {
    const events = await context.store.readStream(streamName('repository', repo.id));
    return events.find((event) => event.type === 'ConceptRelationsRefreshed') ?? null;
  }, 30_000);
  t.ok((refreshed.data.changes as unknown[]).length > 0, 'the scheduler enqueued a relation refresh that found pairs');
  const scheduled = await context.jobs.list({ repositoryId: repo.id, kind: 'refresh_concept_relations', limit: 100 });
  t.ok(scheduled.jobs.every((job) => job.triggerPosition === 0 && job.sourceId === null), 'scheduled jobs carry no trigger event');
  t.ok(scheduled.jobs.some((job) => job.state === 'succeeded'));
});
