import t from 'tap';
import { facts } from '../../src/search/collections/index.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { SearchUnavailableError } from '../../src/search/port.js';

t.test('a search while the cluster cannot be reached is a SearchUnavailableError, its reason naming the cluster', async (t) => {
  // Port 1: nothing listens there, so every connection is refused at once.
  const index = createOpenSearchIndex({ node: 'http://127.0.0.1:1', indexPrefix: 'trial-unreachable', dimensions: 3 });
  t.teardown(() => index.close());
  const error = await index.search(facts, { repositoryId: 'r1', query: 'nobel', limit: 10, offset: 0 }).then(
    () => null,
    (failure: unknown) => failure,
  );
  t.ok(error instanceof SearchUnavailableError, 'told apart from a failure of the request itself');
  if (!(error instanceof SearchUnavailableError)) return;
  t.match(error.reason, /ECONNREFUSED 127\.0\.0\.1:1/);
  t.notMatch(error.message, /127\.0\.0\.1/, 'the message a caller sees does not give the cluster away');
});
