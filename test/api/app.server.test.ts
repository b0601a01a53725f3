import t from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import { eventually, registerUser, startTestService, waitForPipeline } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

/**
 * The service with its event store and read models on the PostgreSQL server (127.0.0.1:5432)
 * instead of PGlite: the same migrations, the same projections, jobs claimed with SKIP LOCKED.
 */
t.test('the vertical slice on the PostgreSQL server', async (t) => {
  const scratch = await openScratchPostgres(undefined, 'factlog_server');
  const url = (scratch.knex.client.config.connection as { connectionString: string }).connectionString;
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE } });
  const service = await startTestService({ overrides: { databases: { default: { url, max_conns: 10 } } } });
  t.teardown(async () => {
    await service.close();
    await web.close();
    await scratch.close();
  });
  t.equal(service.context.db.kind, 'postgres');

  const user = await registerUser(service, 'server@example.org');
  const repo = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'On the server' } })).body;
  const source = (await service.call('POST', `/api/v1/repositories/${repo.id}/sources`, { token: user.token, body: { url: `${web.baseUrl}/curie` } })).body;
  const processed = await eventually(async () => {
    const current = (await service.call('GET', `/api/v1/repositories/${repo.id}/sources/${source.id}`, { token: user.token })).body;
    return ['processed', 'failed'].includes(current.status) ? current : null;
  });
  t.equal(processed.status, 'processed', processed.failure ?? '');
  await waitForPipeline(service, repo.id, user.token);
  const found = await service.call('GET', `/api/v1/repositories/${repo.id}/facts?mode=lexical&query=${encodeURIComponent('"first woman"')}`, { token: user.token });
  t.ok(found.body.total >= 1);
  t.match(found.body.items[0].content, /first woman/);

  const stored = await scratch.knex('events').count<{ n: string }[]>('* as n');
  t.ok(Number(stored[0].n) >= 8, 'the events are in the server database');
  const readModel = await scratch.knex('facts').count<{ n: string }[]>('* as n');
  t.equal(Number(readModel[0].n), processed.fact_count, 'and so is the facts read model');

  const live = await scratch.knex('facts').orderBy('id').select();
  await service.context.projections.rebuild('facts');
  t.same(await scratch.knex('facts').orderBy('id').select(), live, 'a rebuild on the server equals the live rows');

  // Reports on the server: no pgvector there, so candidates are lexical and scored by their words.
  const reports = `/api/v1/repositories/${repo.id}/reports`;
  const report = (await service.call('POST', reports, { token: user.token, body: { text: 'Marie Curie was the first woman to win a Nobel Prize, the article says.' } })).body;
  const annotated = await eventually(async () => {
    const current = (await service.call('GET', `${reports}/${report.id}`, { token: user.token })).body;
    return ['annotated', 'failed'].includes(current.status) ? current : null;
  });
  t.equal(annotated.status, 'annotated', annotated.failure ?? '');
  const annotations = (await service.call('GET', `${reports}/${report.id}/annotations`, { token: user.token })).body;
  t.match(annotations.items[0].facts[0], { content: /first woman/, posture: 'supports' });
  t.equal((await service.call('GET', `${reports}?query=${encodeURIComponent('first woman')}`, { token: user.token })).body.total, 1, 'full-text search on the server');
  const liveReports = await scratch.knex('report_annotations').orderBy(['report_id', 'sentence_index', 'rank']).select();
  await service.context.projections.rebuild('reports');
  t.same(await scratch.knex('report_annotations').orderBy(['report_id', 'sentence_index', 'rank']).select(), liveReports, 'a rebuilt reports read model equals the live one');
});
