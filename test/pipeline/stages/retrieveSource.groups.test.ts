import t from 'tap';

import { coalescingEventStore } from '../../../src/eventstore/coalescing.js';
import { createRetrieveSourceStage } from '../../../src/pipeline/stages/retrieveSource.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS, type FetchedResource } from '../../../src/providers/fetch/http.js';
import { CURIE_ARTICLE, startWebServer } from '../../helpers/webServer.js';
import { openStageFixture } from '../../helpers/decompositionHarness.js';

const fixture = await openStageFixture(t);

t.test('a group of sources: fetched side by side within the places, each job with its own outcome', async (t) => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const pages = Object.fromEntries(Array.from({ length: 6 }, (_, index) => [`/page-${index}`, { body: CURIE_ARTICLE.replace('Marie Curie</h1>', `Marie Curie ${index}</h1>`), holdUntil: held }]));
  const server = await startWebServer(pages);
  t.teardown(server.close);
  const http = createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 10_000 });
  let inFlight = 0;
  let mostAtOnce = 0;
  let bothPlacesTaken!: () => void;
  const twoOut = new Promise<void>((resolve) => (bothPlacesTaken = resolve));
  const fetcher = {
    async fetch(url: string, signal?: AbortSignal): Promise<FetchedResource> {
      inFlight += 1;
      mostAtOnce = Math.max(mostAtOnce, inFlight);
      if (inFlight === 2) bothPlacesTaken();
      try {
        return await http.fetch(url, signal);
      } finally {
        inFlight -= 1;
      }
    },
  };
  const stage = createRetrieveSourceStage({
    // The pipeline's store on PGlite: the group's reads and appends go together.
    store: coalescingEventStore(fixture.store),
    assets: fixture.assets,
    fetcher,
    doiResolver: 'https://doi.org/',
    maxAttempts: 1,
    fetchesAtOnce: 2,
  });

  const sources = await Promise.all(Object.keys(pages).map((path) => fixture.register({ url: `${server.baseUrl}${path}` })));
  const missing = await fixture.register({ url: `${server.baseUrl}/missing` });
  const ids = [...sources, missing, sources[0]];
  const contexts = await Promise.all(ids.map((id) => fixture.contextFor(stage, id)));
  const ran = stage.runMany!(contexts, new AbortController().signal);
  // Waited for, not slept on: on a loaded machine the group's reads can take longer than any fixed pause.
  await twoOut;
  // A third fetch started now would have to be in flight beside these two: give it the turns it would take.
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(inFlight, 2, 'two fetches out while the pages are held, the rest waiting for a place');
  release();
  const outcomes = await Promise.all(await ran);

  t.equal(mostAtOnce, 2, 'never more fetches at once than the places');
  t.same(outcomes.slice(0, 6), Array.from({ length: 6 }, () => ({ ok: true })), 'each page fetched');
  t.match(outcomes[6], { ok: false, error: { name: 'PermanentJobError', message: /http 404/ } }, 'the missing page fails its own job only');
  t.same(outcomes[7], { ok: true }, 'a source twice in the group: the repeat finds it done');
  for (const id of sources) t.equal((await fixture.state(id)).status, 'fetched');
  t.equal((await fixture.state(missing)).status, 'failed');
  t.equal(server.hits.get('/page-0'), 1, 'the repeat fetched nothing');
  const fetchedEvents = (await fixture.events(sources[0])).filter((event) => event.type === 'SourceFetched');
  t.equal(fetchedEvents.length, 1);
});

t.test("a group's jobs end one by one: a page fetched at once is not held behind a host that does not answer", async (t) => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const server = await startWebServer({ '/quick': { body: CURIE_ARTICLE }, '/slow': { body: CURIE_ARTICLE.replace('Marie Curie</h1>', 'Slow Curie</h1>'), holdUntil: held } });
  t.teardown(server.close);
  const stage = createRetrieveSourceStage({
    store: coalescingEventStore(fixture.store),
    assets: fixture.assets,
    fetcher: createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 10_000 }),
    doiResolver: 'https://doi.org/',
    maxAttempts: 1,
  });
  const [slow, quick] = await Promise.all([fixture.register({ url: `${server.baseUrl}/slow` }), fixture.register({ url: `${server.baseUrl}/quick` })]);
  const contexts = await Promise.all([slow, quick].map((id) => fixture.contextFor(stage, id)));
  const [slowOutcome, quickOutcome] = await stage.runMany!(contexts, new AbortController().signal);
  const settled = new Set<string>();
  void Promise.resolve(slowOutcome).then(() => settled.add('slow'));
  t.same(await quickOutcome, { ok: true }, 'the quick page ends');
  t.equal((await fixture.state(quick)).status, 'fetched');
  t.notOk(settled.has('slow'), 'while the slow one is still being fetched');
  release();
  t.same(await slowOutcome, { ok: true });
});
