import t from 'tap';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { concepts, facts, type FactDocument } from '../../src/search/collections/index.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { SearchIndexMigrationError, type SearchLogger } from '../../src/search/port.js';
import { DIMENSIONS, fact, searchContract, type SearchHarness } from './contract.js';
import { deleteIndices, ensureOpenSearch, getJson, uniquePrefix } from './helpers.js';

const run = promisify(execFile);

// The first run downloads OpenSearch (about 60 MB) before the node starts.
t.setTimeout(600_000);

t.test('scripts/opensearch.sh refuses what it cannot do', async (t) => {
  const script = fileURLToPath(new URL('../../scripts/opensearch.sh', import.meta.url));
  const outcome = async (args: string[], env: Record<string, string> = {}) => {
    try {
      await run(script, args, { env: { ...process.env, ...env }, timeout: 120_000 });
      return { code: 0, stderr: '' };
    } catch (error) {
      const failure = error as { code?: number; stderr?: string };
      return { code: failure.code ?? -1, stderr: failure.stderr ?? '' };
    }
  };
  t.match(await outcome(['restart']), { code: 2, stderr: /usage/ }, 'an unknown command');
  t.match(await outcome([]), { code: 2, stderr: /usage/ }, 'no command');
  t.match(await outcome(['status'], { OPENSEARCH_PORT: '19299' }), { code: 1, stderr: /not healthy/ }, 'status of a port where nothing runs');
  await ensureOpenSearch(); // the fetch is done, so the start below gets as far as the JDK check
  t.match(
    await outcome(['start'], { OPENSEARCH_PORT: '19299', OPENSEARCH_JAVA_HOME: '/usr/lib/jvm/temurin-25-jdk-amd64' }),
    { code: 1, stderr: /needs Java 11\.\.21/ },
    'a JDK without the SecurityManager',
  );
});

t.test('OpenSearch', async (t) => {
  const node = await ensureOpenSearch();

  const open = (label: string, options: { log?: SearchLogger; dimensions?: number; prefix?: string } = {}) => {
    const prefix = options.prefix ?? uniquePrefix(label);
    const index = createOpenSearchIndex({
      node,
      indexPrefix: prefix,
      dimensions: options.dimensions ?? DIMENSIONS,
      refresh: true,
      retireDelayMs: 200,
      log: options.log,
    });
    t.teardown(async () => {
      await index.close();
      await deleteIndices(node, prefix);
    });
    return { index, prefix };
  };

  t.test('contract', async (t) =>
    searchContract(t, async (): Promise<SearchHarness> => {
      const prefix = uniquePrefix('contract');
      const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true });
      return {
        index,
        load: (docs) => index.index(facts, docs),
        removeFacts: (repositoryId, ids) => index.remove(facts, repositoryId, ids),
        loadConcepts: (docs) => index.index(concepts, docs),
        updateConcepts: (updates) => index.update(concepts, updates),
        removeConcepts: (repositoryId, ids) => index.remove(concepts, repositoryId, ids),
        close: async () => {
          await index.close();
          await deleteIndices(node, prefix);
        },
      };
    }),
  );

  t.test('the versioned index and its alias are created on first use, then reused', async (t) => {
    const messages: string[] = [];
    const log: SearchLogger = { info: (_details, message) => messages.push(message), warn() {}, error() {} };
    const { index, prefix } = open('mapping', { log });
    t.equal((await getJson(`${node}/_alias/${prefix}-facts`)).status, 404, 'nothing before first use');
    const repo = `repo-${randomUUID()}`;
    const doc = fact(repo, 'Mappings are created by the service.', { vector: [0, 1, 0, 0] });
    await index.index(facts, [doc]);
    const aliases = (await getJson(`${node}/_alias/${prefix}-facts`)).body;
    t.same(Object.keys(aliases), [`${prefix}-facts-v1`], 'alias -> v1');
    const { body } = await getJson(`${node}/${prefix}-facts-v1`);
    const { mappings, settings } = body[`${prefix}-facts-v1`];
    t.match(mappings, {
      dynamic: 'strict',
      _meta: { factlog: { mapping_version: facts.opensearch.mappingVersion, dimensions: DIMENSIONS } },
      properties: {
        content: { type: 'text', analyzer: 'english' },
        repository_id: { type: 'keyword' },
        created_at: { type: 'date' },
        embedding: { type: 'knn_vector', dimension: DIMENSIONS, method: { name: 'hnsw', space_type: 'cosinesimil', engine: 'lucene' } },
      },
    });
    t.equal(settings.index.knn, 'true');
    t.same(messages, ['search index created']);

    const second = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true, log });
    t.teardown(() => second.close());
    t.same(
      await second.ensureIndices(),
      { facts: `${prefix}-facts-v1`, concepts: `${prefix}-concepts-v1`, summaries: `${prefix}-summaries-v1` },
      'another process reuses the index',
    );
    t.same((await second.search(facts, { repositoryId: repo, query: 'mapping', limit: 5, offset: 0 })).items.map((item) => item.id), [doc.id]);
    t.same(messages, ['search index created', 'search index created', 'search index created'], 'the facts index once; ensureIndices also made the concepts and summaries indexes');
    t.same(Object.keys((await getJson(`${node}/${prefix}-facts-v*`)).body), [`${prefix}-facts-v1`], 'no second index');
    t.same(Object.keys((await getJson(`${node}/_alias/${prefix}-concepts`)).body), [`${prefix}-concepts-v1`], 'concepts alias -> v1');
    const conceptMappings = (await getJson(`${node}/${prefix}-concepts-v1/_mapping`)).body[`${prefix}-concepts-v1`].mappings;
    t.match(conceptMappings, {
      dynamic: 'strict',
      _meta: { factlog: { mapping_version: concepts.opensearch.mappingVersion, dimensions: DIMENSIONS } },
      properties: {
        canonical_name: { type: 'text', analyzer: 'standard', fields: { raw: { type: 'keyword' } } },
        aliases: { type: 'text' },
        version: { type: 'long' },
        embedding: { type: 'knn_vector', dimension: DIMENSIONS },
      },
    });
    await second.ensureIndices();
    t.equal(messages.length, 3, 'nothing created a second time');
  });

  t.test('two processes creating the index at once end with one index', async (t) => {
    const prefix = uniquePrefix('race');
    const first = open('race', { prefix }).index;
    const second = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true });
    t.teardown(() => second.close());
    const [a, b] = (await Promise.all([first.ensureIndices(), second.ensureIndices()])).map((indices) => indices.facts);
    t.equal(a, b);
    t.same(Object.keys((await getJson(`${node}/_alias/${prefix}-facts`)).body), [a]);
  });

  t.test('an older mapping is migrated in place; another dimension is refused', async (t) => {
    const prefix = uniquePrefix('migrate');
    // What an older service version would have created: no fact_kind field, mapping version 0.
    const old = await fetch(`${node}/${prefix}-facts-v1`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        settings: { index: { knn: true, number_of_shards: 1, number_of_replicas: 0 } },
        mappings: {
          dynamic: 'strict',
          _meta: { factlog: { mapping_version: 0, dimensions: DIMENSIONS } },
          properties: {
            id: { type: 'keyword' },
            repository_id: { type: 'keyword' },
            content: { type: 'text', analyzer: 'english' },
            content_hash: { type: 'keyword' },
            status: { type: 'keyword' },
            created_at: { type: 'date' },
            embedding: { type: 'knn_vector', dimension: DIMENSIONS, method: { name: 'hnsw', space_type: 'cosinesimil', engine: 'lucene' } },
          },
        },
        aliases: { [`${prefix}-facts`]: {} },
      }),
    });
    t.equal(old.status, 200, await old.text());
    const { index } = open('migrate', { prefix });
    const repo = `repo-${randomUUID()}`;
    await index.index(facts, [fact(repo, 'Migrated mappings accept the new field.', { fact_kind: 'claim' })]);
    const { body } = await getJson(`${node}/${prefix}-facts-v1/_mapping`);
    t.match(body[`${prefix}-facts-v1`].mappings, {
      _meta: { factlog: { mapping_version: facts.opensearch.mappingVersion } },
      properties: { fact_kind: { type: 'keyword' } },
    });
    t.match((await index.search(facts, { repositoryId: repo, query: 'migrated', limit: 1, offset: 0 })).items, [{ fact_kind: 'claim' }]);
    t.same(await index.search(facts, { repositoryId: repo, query: 'migrated', limit: 10, offset: 50_000 }), { total: 1, items: [] }, 'deep pages reach the result window');

    const wider = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: 8, refresh: true });
    t.teardown(() => wider.close());
    await t.rejects(wider.search(facts, { repositoryId: repo, query: 'x', limit: 1, offset: 0 }), SearchIndexMigrationError, 'dimension change needs a rebuild');
    const result = await wider.rebuildIndex(async (target) => {
      await target.index(facts, [fact(repo, 'Re-embedded with the wider model.', { vector: [1, 0, 0, 0, 0, 0, 0, 1] })]);
    });
    t.equal(result.indices.facts.current, `${prefix}-facts-v2`);
    t.same((await wider.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0, 0, 0, 0, 1], k: 1 })).items.map((item) => item.content), ['Re-embedded with the wider model.'], 'the rebuild changed the dimension');
  });

  t.test('a rebuild switches the alias while readers keep getting answers', async (t) => {
    const { index, prefix } = open('rebuild');
    const repo = `repo-${randomUUID()}`;
    const corpus: FactDocument[] = Array.from({ length: 300 }, (_, position) =>
      fact(repo, `Rebuild fact ${position} about ${position % 2 === 0 ? 'rivers' : 'mountains'}.`, {
        vector: [1, position / 300, position % 7, 0.5],
      }),
    );
    await index.index(facts, corpus);
    t.equal((await index.ensureIndices()).facts, `${prefix}-facts-v1`);

    let stop = false;
    let answered = 0;
    const failures: string[] = [];
    const totals = new Set<number>();
    const reader = (async () => {
      while (!stop) {
        try {
          const lexical = await index.search(facts, { repositoryId: repo, query: 'rivers', limit: 10, offset: 0 });
          const nearest = await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0.5], k: 3 });
          totals.add(lexical.total);
          if (lexical.items.length === 0 || nearest.items.length === 0) failures.push(`empty answer (total ${lexical.total})`);
          answered += 1;
        } catch (error) {
          failures.push(error instanceof Error ? error.message : String(error));
        }
      }
    })();

    const live = fact(repo, 'Written live about rivers while the rebuild ran.');
    const result = await index.rebuildIndex(async (target) => {
      for (let start = 0; start < corpus.length; start += 50) {
        await target.index(facts, corpus.slice(start, start + 50));
        if (start === 100) await index.index(facts, [live]); // a live write during the fill
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    });
    // Keep reading across the switch and the deletion of the old index.
    await new Promise((resolve) => setTimeout(resolve, 500));
    stop = true;
    await reader;

    t.same(failures, [], 'no search failed or came back empty during the rebuild');
    t.ok(answered > 10, `readers got ${answered} answers during the rebuild`);
    t.same(result, {
      indices: {
        facts: { previous: `${prefix}-facts-v1`, current: `${prefix}-facts-v2` },
        concepts: { previous: `${prefix}-concepts-v1`, current: `${prefix}-concepts-v2` },
        summaries: { previous: `${prefix}-summaries-v1`, current: `${prefix}-summaries-v2` },
      },
      written: 300,
    });
    t.same(Object.keys((await getJson(`${node}/_alias/${prefix}-facts`)).body), [`${prefix}-facts-v2`], 'alias -> v2');
    t.equal((await getJson(`${node}/${prefix}-facts-v1`)).status, 404, 'old index deleted');
    const after = await index.search(facts, { repositoryId: repo, query: 'rivers', limit: 1, offset: 0 });
    t.equal(after.total, 151, 'the rebuilt index has every fact, and the live write');
    t.same([...totals].filter((total) => total !== 150 && total !== 151), [], 'readers saw the old or the new index, nothing in between');
    t.equal((await getJson(`${node}/${prefix}-facts-v2/_settings`)).body[`${prefix}-facts-v2`].settings.index.refresh_interval, '1s', 'refreshes are back on');
  });

  t.test('a failed fill leaves the alias on the old index', async (t) => {
    const { index, prefix } = open('failed-rebuild');
    const repo = `repo-${randomUUID()}`;
    await index.index(facts, [fact(repo, 'Kept through a failed rebuild.')]);
    await t.rejects(
      index.rebuildIndex(async (target) => {
        await target.index(facts, [fact(repo, 'Half a rebuild.')]);
        throw new Error('the log could not be read');
      }),
      /the log could not be read/,
    );
    t.same(Object.keys((await getJson(`${node}/_alias/${prefix}-facts`)).body), [`${prefix}-facts-v1`]);
    t.same(Object.keys((await getJson(`${node}/${prefix}-facts-v*`)).body), [`${prefix}-facts-v1`], 'the half-built index is gone');
    t.equal((await index.search(facts, { repositoryId: repo, query: '', limit: 5, offset: 0 })).total, 1);
    await t.rejects(
      index.rebuildIndex(async (target) => target.index(facts, [{ ...fact(repo, 'x'), created_at: 'not a time' }])),
      { name: 'InvalidSearchRequestError' },
      'the fill\'s writes are validated too',
    );
    const result = await index.rebuildIndex(async (target) => target.index(facts, [fact(repo, 'Only this one.')]));
    t.equal(result.indices.facts.current, `${prefix}-facts-v2`, 'the next rebuild works');
  });

  t.test('a document OpenSearch refuses fails the batch with its reason', async (t) => {
    const { index } = open('refused');
    const repo = `repo-${randomUUID()}`;
    const huge = fact(repo, 'Too long a keyword.', { content_hash: 'x'.repeat(40_000) });
    await t.rejects(index.index(facts, [huge]), { name: 'SearchIndexWriteError', message: /not indexed/ });
  });

  t.test('bad options are refused', async (t) => {
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: 'Upper', dimensions: 4 }), RangeError);
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: '-dash', dimensions: 4 }), RangeError);
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: 'ok', dimensions: 0 }), RangeError);
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: 'ok', dimensions: 2.5 }), RangeError);
    t.throws(() => createOpenSearchIndex({ node, indexPrefix: 'ok', dimensions: 4, bulkBatchSize: 0 }), RangeError);
  });

  t.test('a repository deleted right after indexing loses every fact', async (t) => {
    const { index } = open('delete-fresh', {});
    const unrefreshed = createOpenSearchIndex({ node, indexPrefix: index.aliasOf(facts).replace(/-facts$/, ''), dimensions: DIMENSIONS, refresh: false });
    t.teardown(() => unrefreshed.close());
    const repo = `repo-${randomUUID()}`;
    await unrefreshed.index(facts, Array.from({ length: 20 }, (_, position) => fact(repo, `Fresh fact ${position}.`)));
    await unrefreshed.removeRepository(repo);
    await fetch(`${node}/${index.aliasOf(facts)}/_refresh`, { method: 'POST' });
    t.equal((await index.search(facts, { repositoryId: repo, query: '', limit: 1, offset: 0 })).total, 0, 'not one survived');
  });
});
