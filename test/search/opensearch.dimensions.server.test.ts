import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { concepts, facts } from '../../src/search/collections/index.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { mappingOf } from '../../src/search/opensearch/mappings.js';
import { MAX_VECTOR_DIMENSIONS } from '../../src/search/port.js';
import { concept, fact } from './contract.js';
import { assertExactNearest, deleteIndices, ensureOpenSearch, exactNearest, gradedVectors, uniquePrefix } from './helpers.js';

// Vectors of large embedding models on the distributed tier's OpenSearch (2.19.1, lucene engine):
// docs/configuration.md, "Embedding dimensions".

// The first run downloads OpenSearch (about 60 MB) before the node starts.
t.setTimeout(600_000);

/** Lucene computes the cosine in float32: scores agree with the exact one to about 1e-6. */
const SCORE_TOLERANCE = 1e-4;

t.test('OpenSearch with large embedding models', async (t) => {
  const node = await ensureOpenSearch();
  /** An index whose indices go when the subtest `t` ends. */
  const open = (t: Test, label: string, dimensions: number) => {
    const prefix = uniquePrefix(label);
    const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions, refresh: true, requestTimeoutMs: 120_000 });
    t.teardown(async () => {
      await index.close();
      await deleteIndices(node, prefix);
    });
    return index;
  };

  t.test('3,072-dimensional facts and concepts (text-embedding-3-large) are indexed and found by k-NN', async (t) => {
    const dimensions = 3072;
    const index = open(t, 'dims-3072', dimensions);
    const repositoryId = `repo-${randomUUID()}`;
    const { query, vectors } = gradedVectors(dimensions, 30, 3072);
    const docs = vectors.map((vector, n) => fact(repositoryId, `Fact ${n} of a large model.`, { vector }));
    await index.index(facts, docs);
    assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: query, k: 5 })).items, exactNearest(docs, query, 5), 'facts', SCORE_TOLERANCE);
    const [many] = await index.knnMany(facts, [{ repositoryId, vector: query, k: 12 }]);
    assertExactNearest(t, many.items, exactNearest(docs, query, 12), 'knnMany', SCORE_TOLERANCE);

    // Concepts get their vectors by update (ConceptEmbedded), through the update script.
    const named = vectors.slice(0, 10).map((vector, n) => ({ ...concept(repositoryId, `Concept ${n}`), vector }));
    await index.index(concepts, named.map(({ vector: _vector, ...rest }) => rest));
    await index.update(concepts, named.map(({ id, vector }) => ({ id, repository_id: repositoryId, vector })));
    assertExactNearest(t, (await index.knn(concepts, { repositoryId, vector: query, k: 3 })).items, exactNearest(named, query, 3), 'concepts', SCORE_TOLERANCE);
  });

  t.test('200 facts of 16,000 dimensions in one call: bulk requests stay under the cluster\'s request size limit', async (t) => {
    // Each document carries its vector twice (script parameter and upsert), about 20 bytes a
    // value: 200 of them were one bulk request of about 130 MB, refused with 413 (the node's
    // http.max_content_length is 100 MB), and the projection stopped on it.
    const dimensions = MAX_VECTOR_DIMENSIONS;
    const index = open(t, 'dims-16000', dimensions);
    const repositoryId = `repo-${randomUUID()}`;
    const { query, vectors } = gradedVectors(dimensions, 200, 16);
    const docs = vectors.map((vector, n) => fact(repositoryId, `Fact ${n} of the longest vectors.`, { vector }));
    await index.index(facts, docs);
    t.equal((await index.search(facts, { repositoryId, query: '', limit: 0, offset: 0 })).total, docs.length, 'every fact is indexed');
    assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: query, k: 5 })).items, exactNearest(docs, query, 5), 'knn', SCORE_TOLERANCE);
  });

  t.test('the lucene engine stores MAX_VECTOR_DIMENSIONS and refuses one more, as the configuration does', async (t) => {
    const prefix = uniquePrefix('dims-limit');
    t.teardown(() => deleteIndices(node, prefix));
    const create = (dimensions: number) =>
      fetch(`${node}/${prefix}-${dimensions}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ settings: { index: { knn: true } }, mappings: mappingOf(facts, dimensions) }),
      });
    t.equal((await create(MAX_VECTOR_DIMENSIONS)).status, 200);
    const refused = await create(MAX_VECTOR_DIMENSIONS + 1);
    t.equal(refused.status, 400);
    t.match(await refused.text(), /Dimension value cannot be greater than 16000 for vector with engine: lucene/);
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: MAX_VECTOR_DIMENSIONS + 1 }), RangeError, 'the adapter refuses it before asking');
  });
});
