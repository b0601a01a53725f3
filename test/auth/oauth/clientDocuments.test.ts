import t from 'tap';
import { createClientDocumentResolver, type FetchedClientDocument } from '../../../src/auth/oauth/clientDocuments.js';
import { OAuthError } from '../../../src/auth/oauth/errors.js';

const URL_A = 'https://app.example/client.json';
const documentOf = (body: unknown, overrides: Partial<FetchedClientDocument> = {}): FetchedClientDocument => ({
  finalUrl: URL_A,
  status: 200,
  contentType: 'application/json; charset=utf-8',
  body: Buffer.from(JSON.stringify(body)),
  ...overrides,
});
const valid = { client_id: URL_A, client_name: 'App', redirect_uris: ['https://app.example/cb'] };

async function codeOf(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    () => 'accepted',
    (error: unknown) => (error instanceof OAuthError ? error.code : `unexpected ${String(error)}`),
  );
}

t.test('a valid document is cached for the TTL; concurrent lookups share one fetch', async (t) => {
  let clock = 0;
  let fetches = 0;
  const resolver = createClientDocumentResolver(async () => {
    fetches += 1;
    return documentOf(valid);
  }, { ttlMs: 1000, now: () => clock });
  const [first, second] = await Promise.all([resolver.resolve(URL_A), resolver.resolve(URL_A)]);
  t.equal(first.client_name, 'App');
  t.same(second, first);
  t.equal(fetches, 1);
  clock = 999;
  await resolver.resolve(URL_A);
  t.equal(fetches, 1, 'still cached');
  clock = 1000;
  await resolver.resolve(URL_A);
  t.equal(fetches, 2, 'fetched again after the TTL');
});

t.test('unusable answers are refused and not cached', async (t) => {
  let answer: FetchedClientDocument = documentOf(valid, { status: 404 });
  let fetches = 0;
  const resolver = createClientDocumentResolver(async () => {
    fetches += 1;
    return answer;
  });
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', '404');
  answer = documentOf(valid, { finalUrl: 'https://elsewhere.example/client.json' });
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', 'redirected');
  answer = documentOf(valid, { contentType: 'text/html' });
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', 'not JSON by content type');
  answer = { ...documentOf(valid), body: Buffer.from('{') };
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', 'malformed JSON');
  answer = { ...documentOf(valid), body: Buffer.alloc(70_000, 32) };
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', 'too large');
  answer = documentOf({ ...valid, client_id: 'https://other.example/client.json' });
  t.equal(await codeOf(resolver.resolve(URL_A)), 'invalid_client', 'client_id is not the URL');
  const failing = createClientDocumentResolver(async () => {
    throw new Error('connection refused');
  });
  t.equal(await codeOf(failing.resolve(URL_A)), 'invalid_client', 'fetch failure');
  const why = await failing.resolve(URL_A).catch((error: OAuthError) => error.description);
  t.equal(why, 'the client metadata document could not be fetched', 'not why: the reason would map what the server reaches');
  answer = documentOf(valid);
  t.equal(await codeOf(resolver.resolve(URL_A)), 'accepted', 'the fixed document is seen at once: failures were not cached');
  t.equal(fetches, 7);
  t.equal(await codeOf(resolver.resolve('http://app.example/client.json')), 'invalid_client', 'not an https client id: never fetched');
  t.equal(fetches, 7);
});
