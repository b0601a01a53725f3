/**
 * Live projection batches during ingest: the 33-document test corpus through the embedded
 * pipeline (in-process `startTestService` with the test overrides, as bench/pipelineLog.ts runs
 * it), counting the projection runner's batches (its advisory-lock statement, one per batch
 * transaction), the appends and all statements per document, and this process's CPU time.
 *
 *   node --import=tsx bench/liveBatches.ts
 *
 * Prints one line; docs/performance.md ("Event store and projections", second round) has the
 * numbers with and without the runner's pause between live batches.
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { createRepository, injectApi, PIPELINE_TEST_OVERRIDES, registerCorpus, startCorpusServer, waitForPipeline } from '../test/helpers/corpus.js';
import { registerUser, startTestService } from '../test/helpers/service.js';

const web = await startCorpusServer();
const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
let batches = 0;
let statements = 0;
let appends = 0;
const count = (query: { sql: string }) => {
  statements += 1;
  // lockProjectionKeys (src/projection/lock.ts): the first statement of every projection batch.
  if (query.sql.startsWith('SELECT count(pg_advisory_xact_lock(key))')) batches += 1;
  if (query.sql.includes('factlog_append_events')) appends += 1;
};
const loadAtStart = os.loadavg()[0];
const cpuBefore = process.cpuUsage();
const begin = performance.now();
try {
  service.context.db.knex.on('query', count);
  const { token } = await registerUser(service, 'bench@example.org');
  const api = injectApi(service, token);
  const repositoryId = await createRepository(api, 'Corpus');
  await registerCorpus(api, repositoryId, web.documents);
  await waitForPipeline(api, repositoryId, { timeoutMs: 900_000 });
  service.context.db.knex.off('query', count);
  const cpu = process.cpuUsage(cpuBefore);
  const documents = web.documents.length;
  process.stdout.write(
    `${documents} documents in ${((performance.now() - begin) / 1000).toFixed(1)} s (load ${loadAtStart.toFixed(1)} → ${os.loadavg()[0].toFixed(1)}): ` +
      `projection batches ${(batches / documents).toFixed(1)}, appends ${(appends / documents).toFixed(1)}, ` +
      `statements ${(statements / documents).toFixed(0)}, CPU ${((cpu.user + cpu.system) / 1000 / documents).toFixed(0)} ms per document\n`,
  );
} finally {
  await service.close();
  await web.close();
}
