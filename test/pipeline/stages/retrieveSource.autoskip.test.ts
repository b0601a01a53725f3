import t from 'tap';

import { createRetrieveSourceStage } from '../../../src/pipeline/stages/retrieveSource.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS, type AutoSkipSettings } from '../../../src/providers/fetch/http.js';
import { createHostHealthReader } from '../../../src/providers/fetch/hostHealth.js';
import { hostHealthProjection } from '../../../projections/hostHealth.js';
import { sourcesProjection } from '../../../projections/sources.js';
import { CURIE_ARTICLE, startWebServer } from '../../helpers/webServer.js';
import { openStageFixture } from '../../helpers/decompositionHarness.js';

const HOUR = 3_600_000;
const fixture = await openStageFixture(t);

async function hostRow(host: string) {
  await fixture.project([sourcesProjection, hostHealthProjection]);
  const row = await fixture.db.knex('host_health').where({ host }).first();
  return row ? { attempts: Number(row.attempts), failures: Number(row.failures), last_error: row.last_error as string | null } : null;
}

t.test('a host that keeps failing is skipped without a fetch, and recovers after the cooldown', async (t) => {
  const server = await startWebServer({
    '/ok': { body: CURIE_ARTICLE },
    '/broken': { status: 500, body: 'down' },
    '/broken-1': { status: 500, body: 'down' },
    '/broken-2': { status: 502, body: 'down' },
    '/broken-3': { status: 503, body: 'down' },
  });
  t.teardown(server.close);
  const host = new URL(server.baseUrl).host;
  let clockOffset = 0;
  const autoSkip: AutoSkipSettings = { enabled: true, minSample: 4, failureThreshold: 0.75, cooldownMs: HOUR };
  const stage = createRetrieveSourceStage({
    store: fixture.store,
    assets: fixture.assets,
    // The fetcher's own in-process skip is off: the stage decides from the log.
    fetcher: createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 5000, autoSkip: { ...autoSkip, enabled: false } }),
    doiResolver: 'https://doi.org/',
    maxAttempts: 3,
    hostHealth: { reader: createHostHealthReader(fixture.db.knex), settings: autoSkip },
    now: () => Date.now() + clockOffset,
  });

  const ok = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.equal(await fixture.run(stage, ok), null);
  // Bracketed by the clock around the last failure, not bounded by elapsed time.
  let lastFailureFrom = 0;
  for (const path of ['/broken-1', '/broken-2', '/broken-3']) {
    const failing = await fixture.register({ url: `${server.baseUrl}${path}` });
    lastFailureFrom = Date.now();
    // The fetcher retried already: its last failure ends the source on the job's first attempt.
    t.match(await fixture.run(stage, failing, 1), { name: 'PermanentJobError', message: /http 50\d/ }, `${path} fails for good`);
    t.equal((await fixture.state(failing)).status, 'failed');
  }
  t.match(await hostRow(host), { attempts: 4, failures: 3, last_error: /http 503/ }, 'one success and three failures');

  const hitsBefore = server.hits.get('/ok');
  const skipped = await fixture.register({ url: `${server.baseUrl}/ok` });
  const error = await fixture.run(stage, skipped);
  t.match(error, {
    name: 'PermanentJobError',
    message: new RegExp(`^auto-skipped: host ${host.replace(/\./g, '\\.')} failed 3 of 4 fetches \\(≥ 75%\\); skipping until \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$`),
  });
  t.equal(server.hits.get('/ok'), hitsBefore, 'the host was not contacted');
  const state = await fixture.state(skipped);
  t.equal(state.status, 'failed');
  t.equal(state.failure, `retrieve_source: ${error?.message}`);
  const until = Date.parse(/skipping until (\S+)$/.exec(error?.message ?? '')?.[1] ?? '');
  // The message gives whole seconds: the last failure's start, so cut, is the lower bound.
  t.ok(until >= Math.floor((lastFailureFrom + HOUR) / 1000) * 1000 && until <= Date.now() + HOUR, 'until is the last failure plus the cooldown');
  t.same((await hostRow(host))?.attempts, 4, 'the skip itself is not an outcome of the host');

  // Another source of the host meets the skip too; still not an outcome.
  const flaky = await fixture.register({ url: `${server.baseUrl}/broken` });
  t.match(await fixture.run(stage, flaky), { message: /^auto-skipped: host/ });
  t.equal(server.hits.get('/broken') ?? 0, 0);
  t.match(await hostRow(host), { attempts: 4, failures: 3, last_error: /http 503/ });

  clockOffset = HOUR + 1000;
  const probe = await fixture.register({ url: `${server.baseUrl}/broken` });
  t.match(await fixture.run(stage, probe), { message: /http 500/ }, 'after the cooldown the host is tried again');
  t.equal(server.hits.get('/broken'), 1);
  t.match(await hostRow(host), { attempts: 5, failures: 4, last_error: /http 500/ }, 'the failed probe counts');
  // (That the probe's failure closes the host for another cooldown is the decision's unit test:
  // here the clock runs an hour ahead of the events' own times.)

  const recovered = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.equal(await fixture.run(stage, recovered), null);
  t.equal((await fixture.state(recovered)).status, 'fetched');
  t.match(await hostRow(host), { attempts: 6, failures: 4 }, 'a success counts too');

  const hosts = async () => (await fixture.db.knex('host_health').select('host', 'attempts')) as Array<{ host: string; attempts: number }>;
  const before = await hosts();
  const upload = await fixture.register({ upload: Buffer.from('Plain notes about otters.'), contentType: 'text/plain' });
  t.equal(await fixture.run(stage, upload), null);
  await fixture.project([sourcesProjection, hostHealthProjection]);
  t.same(await hosts(), before, 'uploads have no host');
});

t.test('disabled auto-skip or a healthy host always fetch', async (t) => {
  const server = await startWebServer({ '/ok': { body: CURIE_ARTICLE } });
  t.teardown(server.close);
  const host = new URL(server.baseUrl).host;
  await fixture.db.knex('host_health').insert({
    host,
    attempts: 10,
    failures: 10,
    last_failure_at: new Date().toISOString(),
    last_error: 'http 500',
    updated_at: new Date().toISOString(),
  });
  const build = (enabled: boolean, failureThreshold = 0.85) =>
    createRetrieveSourceStage({
      store: fixture.store,
      assets: fixture.assets,
      fetcher: createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1 }),
      doiResolver: 'https://doi.org/',
      maxAttempts: 1,
      hostHealth: { reader: createHostHealthReader(fixture.db.knex), settings: { enabled, minSample: 5, failureThreshold, cooldownMs: HOUR } },
    });
  const first = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.match(await fixture.run(build(true), first), { message: /^auto-skipped: host .* failed 10 of 10 fetches/ }, 'enabled: skipped');
  const second = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.equal(await fixture.run(build(false), second), null, 'disabled: fetched');
  t.equal(server.hits.get('/ok'), 1);
});

t.test("the fetcher's own in-process skip is recorded as a skip, not as a host failure", async (t) => {
  const server = await startWebServer({ '/ok': { body: CURIE_ARTICLE }, '/broken': { status: 500, body: 'down' } });
  t.teardown(server.close);
  const host = new URL(server.baseUrl).host;
  const stage = createRetrieveSourceStage({
    store: fixture.store,
    assets: fixture.assets,
    fetcher: createHttpFetcher({
      ...DEFAULT_FETCH_SETTINGS,
      maxAttempts: 1,
      autoSkip: { enabled: true, minSample: 1, failureThreshold: 0.5, cooldownMs: HOUR },
    }),
    doiResolver: 'https://doi.org/',
    maxAttempts: 1,
  });
  const broken = await fixture.register({ url: `${server.baseUrl}/broken` });
  t.match(await fixture.run(stage, broken), { message: /http 500/ });
  const next = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.match(await fixture.run(stage, next), { message: /^auto-skipped: fetching .* host auto-skipped/ });
  t.match(await hostRow(host), { attempts: 1, failures: 1, last_error: /http 500/ });
});

t.test('missing pages are no failure of their host: any number of 404s skips no one', async (t) => {
  const server = await startWebServer({ '/ok': { body: CURIE_ARTICLE } });
  t.teardown(server.close);
  const host = new URL(server.baseUrl).host;
  const autoSkip: AutoSkipSettings = { enabled: true, minSample: 3, failureThreshold: 0.5, cooldownMs: HOUR };
  const stage = createRetrieveSourceStage({
    store: fixture.store,
    assets: fixture.assets,
    // Both skips on, the fetcher's in-process one and the stage's from the log.
    fetcher: createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, autoSkip }),
    doiResolver: 'https://doi.org/',
    maxAttempts: 1,
    hostHealth: { reader: createHostHealthReader(fixture.db.knex), settings: autoSkip },
  });
  for (let page = 0; page < 6; page += 1) {
    const missing = await fixture.register({ url: `${server.baseUrl}/missing-${page}` });
    t.match(await fixture.run(stage, missing), { message: /http 404/ });
  }
  t.match(await hostRow(host), { attempts: 6, failures: 0 }, 'six answers of the host, no failure');
  const ok = await fixture.register({ url: `${server.baseUrl}/ok` });
  t.equal(await fixture.run(stage, ok), null, 'the host is fetched as before');
});
