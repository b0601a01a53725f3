import t from 'tap';
import { facts } from '../../src/search/collections/index.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { BULK_MAX_BYTES, bulkBatches } from '../../src/search/opensearch/bulk.js';
import { knnBody, MAX_TERMS_PER_QUERY, searchBody } from '../../src/search/opensearch/query.js';
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

t.test('bulk requests are cut by count and by bytes, so large vectors never make one OpenSearch refuses as too large (413)', async (t) => {
  const action = (id: string, values: number) => ({ id, lines: [{ update: { _id: id } }, { script: { params: { vector: Array.from({ length: values }, () => 0.123456789) } } }] });
  const bytesOf = (batch: readonly { lines: unknown[] }[]) => batch.reduce((sum, { lines }) => sum + lines.reduce<number>((size, line) => size + JSON.stringify(line).length + 1, 0), 0);
  const small = Array.from({ length: 1200 }, (_, n) => action(`s${n}`, 4));
  t.same(bulkBatches(small, 500, BULK_MAX_BYTES).map((batch) => batch.length), [500, 500, 200], 'small documents: by count');
  // 16,000 dimensions, twice a document: about 350 KB of JSON each here.
  const large = Array.from({ length: 60 }, (_, n) => action(`l${n}`, 2 * 16_000));
  const batches = bulkBatches(large, 500, BULK_MAX_BYTES);
  t.ok(batches.length > 1, `several requests (${batches.length})`);
  t.ok(batches.every((batch) => bytesOf(batch) <= BULK_MAX_BYTES), 'each at most BULK_MAX_BYTES');
  t.same(batches.flat().map(({ id }) => id), large.map(({ id }) => id), 'every action once, in order');
  t.same(bulkBatches([action('huge', 10), action('next', 10)], 500, 100).map((batch) => batch.map(({ id }) => id)), [['huge'], ['next']], 'an action over the limit goes alone');
});

t.test('an id set longer than one terms query takes (index.max_terms_count) is split into terms queries any of which matches', async (t) => {
  const many = Array.from({ length: MAX_TERMS_PER_QUERY * 2 + 5 }, (_, index) => `fact-${index}`);
  type Filtered = { filter: Array<Record<string, unknown>> };
  const idFilter = (bool: Filtered) => bool.filter.find((clause) => 'bool' in clause || ('terms' in clause && 'id' in (clause.terms as object)));
  const expected = {
    bool: {
      should: [many.slice(0, MAX_TERMS_PER_QUERY), many.slice(MAX_TERMS_PER_QUERY, 2 * MAX_TERMS_PER_QUERY), many.slice(2 * MAX_TERMS_PER_QUERY)].map((id) => ({ terms: { id } })),
      minimum_should_match: 1,
    },
  };
  const lexical = searchBody(facts, { repositoryId: 'r', query: 'wasps', limit: 10, offset: 0, ids: many });
  t.same(idFilter((lexical?.body.query as { bool: Filtered }).bool), expected, 'lexical');
  const nearest = knnBody(facts, { repositoryId: 'r', vector: [1, 0, 0, 0], k: 5, ids: many });
  t.same(idFilter((nearest.query as { knn: { embedding: { filter: { bool: Filtered } } } }).knn.embedding.filter.bool), expected, 'k-NN');
  const few = searchBody(facts, { repositoryId: 'r', query: '', limit: 10, offset: 0, ids: ['a', 'b'] });
  t.same(idFilter((few?.body.query as { bool: Filtered }).bool), { terms: { id: ['a', 'b'] } }, 'a short list stays one terms query');
});

t.test('hidden ids are left out of lexical and k-NN searches (must_not), split like ids however many', async (t) => {
  const many = Array.from({ length: MAX_TERMS_PER_QUERY + 3 }, (_, index) => `fact-${index}`);
  type Restricted = { must_not: Array<Record<string, unknown>> };
  const lexical = searchBody(facts, { repositoryId: 'r', query: 'wasps', limit: 10, offset: 0, hide: ['a', 'b'] });
  t.same((lexical?.body.query as { bool: Restricted }).bool.must_not.slice(1), [{ terms: { id: ['a', 'b'] } }], 'lexical: the hidden ids beside the hidden statuses');
  const nearest = knnBody(facts, { repositoryId: 'r', vector: [1, 0, 0, 0], k: 5, hide: many });
  t.same((nearest.query as { knn: { embedding: { filter: { bool: Restricted } } } }).knn.embedding.filter.bool.must_not.slice(1), [
    { bool: { should: [{ terms: { id: many.slice(0, MAX_TERMS_PER_QUERY) } }, { terms: { id: many.slice(MAX_TERMS_PER_QUERY) } }], minimum_should_match: 1 } },
  ], 'k-NN: inside the HNSW filter, so k of the others come back');
  const none = searchBody(facts, { repositoryId: 'r', query: '', limit: 10, offset: 0, hide: [] });
  t.equal((none?.body.query as { bool: Restricted }).bool.must_not.length, 1, 'an empty list adds nothing');
});
