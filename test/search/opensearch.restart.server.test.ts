import t from 'tap';
import { randomUUID } from 'node:crypto';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { facts, type FactDocument } from '../../src/search/collections/index.js';
import { DIMENSIONS, fact } from './contract.js';
import { deleteIndices, ensureOpenSearch, openSearchHealth, openSearchScript, uniquePrefix } from './helpers.js';

/**
 * Restart tolerance: writes fail while OpenSearch is down, and retrying them after it is back
 * converges with no fact lost or doubled. This suite stops its node, so it runs its own on a
 * port of its own (not the one other suites share), and stops it at the end.
 */
const port = Number(process.env.OPENSEARCH_RESTART_PORT ?? 19210);

t.setTimeout(600_000);

/** What a projection runner does with a failed batch: try again with backoff until it lands. */
async function retryUntilApplied(apply: () => Promise<void>, timeoutMs = 60_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt += 1) {
    try {
      await apply();
      return attempt;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

t.test('indexing retried across an OpenSearch restart converges', async (t) => {
  const node = await ensureOpenSearch(port);
  const prefix = uniquePrefix('restart');
  const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true, bulkBatchSize: 100, requestTimeoutMs: 10_000 });
  t.teardown(async () => {
    await index.close();
    if ((await openSearchHealth(port)) !== null) await deleteIndices(node, prefix);
    await openSearchScript('stop', port);
  });
  const repo = `repo-${randomUUID()}`;
  const before = fact(repo, 'Indexed before the restart.', { vector: [1, 0, 0, 0] });
  await index.index(facts, [before]);

  // A large write in flight when the node goes down.
  const corpus: FactDocument[] = Array.from({ length: 5000 }, (_, position) => fact(repo, `Bulk fact ${position} about restarts.`));
  const inFlight = index.index(facts, corpus).then(
    () => 'completed',
    (error: unknown) => `failed: ${error instanceof Error ? error.name : String(error)}`,
  );
  const counter = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS });
  t.teardown(() => counter.close());
  while ((await counter.search(facts, { repositoryId: repo, query: 'restarts', limit: 0, offset: 0 })).total === 0) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await openSearchScript('stop', port);
  t.comment(`the bulk write in flight ${await inFlight}`);

  const during = fact(repo, 'Written while the node was down.', { vector: [0, 1, 0, 0] });
  await t.rejects(index.index(facts, [during]), 'a write while the node is down fails (so the runner keeps the event)');
  await t.rejects(index.search(facts, { repositoryId: repo, query: 'restart', limit: 1, offset: 0 }), 'so does a search');

  await openSearchScript('start', port);
  const attempts = await retryUntilApplied(() => index.index(facts, [...corpus, during]));
  t.ok(attempts >= 1, `applied after ${attempts} attempt(s)`);
  await retryUntilApplied(() => index.index(facts, [during]));

  const total = await index.search(facts, { repositoryId: repo, query: '', limit: 0, offset: 0 });
  t.equal(total.total, corpus.length + 2, 'every fact once: none lost, none doubled');
  t.equal((await index.search(facts, { repositoryId: repo, query: 'bulk', limit: 0, offset: 0 })).total, corpus.length, 'the bulk facts, once each');
  t.same(
    (await index.knn(facts, { repositoryId: repo, vector: [1, 0.1, 0, 0], k: 2 })).items.map((item) => item.id),
    [before.id, during.id],
    'vectors from before and after the restart',
  );
});
