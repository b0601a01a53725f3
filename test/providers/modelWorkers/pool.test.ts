import t from 'tap';
import { ModelCallError } from '../../../src/providers/llm/port.js';
import { defaultModelWorkerCount, ModelWorkerPool } from '../../../src/providers/modelWorkers/pool.js';

/** The pool's promises on the real worker (worker.ts), not on a stand-in. */

t.test('sized to the machine, at least one worker', async (t) => {
  t.ok(defaultModelWorkerCount() >= 1 && defaultModelWorkerCount() <= 4);
  t.throws(() => new ModelWorkerPool({ size: 0 }), RangeError);
  t.throws(() => new ModelWorkerPool({ size: 1.5 }), RangeError);
});

t.test('a worker that dies fails its calls with a retryable error, and the next call runs on a new worker', async (t) => {
  // A small heap: embedding many texts at once runs it out of memory, a real crash of the worker.
  const pool = new ModelWorkerPool({ size: 1, resourceLimits: { maxOldGenerationSizeMb: 48 } });
  t.teardown(() => pool.close());
  await pool.wordTable();
  const texts = Array.from({ length: 400_000 }, (_, i) => `Fact ${i} about Marie Curie and radium.`);
  const error = await pool.call({ method: 'embed', texts }).then(
    () => null,
    (rejected: unknown) => rejected,
  );
  t.ok(error instanceof ModelCallError, 'a ModelCallError');
  t.equal((error as ModelCallError).permanent, false, 'transient: the job runtime retries it');
  t.match((error as ModelCallError).message, /worker stopped .*memory/);
  t.equal(pool.workerCount, 0, 'the dead worker is gone');

  const flat = await pool.call<Float64Array>({ method: 'embed', texts: ['Radium glows.'] });
  t.equal(pool.workerCount, 1, 'a new worker took its place');
  t.equal(flat.length, 100, 'and embeds with the shared table it was given');
});

t.test('a call whose signal aborts is rejected at once with the reason, and its worker replaced', async (t) => {
  const pool = new ModelWorkerPool({ size: 1 });
  t.teardown(() => pool.close());
  await pool.wordTable();
  const controller = new AbortController();
  const texts = Array.from({ length: 50_000 }, (_, i) => `Fact ${i} about Marie Curie and radium.`);
  const call = pool.call({ method: 'embed', texts }, controller.signal);
  controller.abort(new Error('job timed out'));
  await t.rejects(call, { message: 'job timed out' });
  const flat = await pool.call<Float64Array>({ method: 'embed', texts: ['Radium glows.'] });
  t.equal(flat.length, 100, 'the pool goes on');
  await t.rejects(pool.call({ method: 'embed', texts: ['x'] }, AbortSignal.abort(new Error('already'))), { message: 'already' });
});

t.test('errors of a call come back as their class; the worker survives them', async (t) => {
  const pool = new ModelWorkerPool({ size: 1 });
  t.teardown(() => pool.close());
  // @ts-expect-error: a call the worker does not know
  await t.rejects(pool.call({ method: 'no-such-call' }), { name: 'TypeError', message: /unknown model call "no-such-call"/ });
  await t.rejects(pool.call({ method: 'embed', texts: ['x'] }), /word table was not given/, 'embed before the table is loaded');
  const facts = await pool.call({ method: 'extractFacts', input: { text: 'Marie Curie was a physicist.', chunkIndex: 0 } });
  t.same(facts, [{ content: 'Marie Curie was a physicist.', sourceText: 'Marie Curie was a physicist.', sentenceIndex: 0 }]);
  t.equal(pool.workerCount, 1);
});

t.test('close fails calls in flight and refuses later ones', async (t) => {
  const pool = new ModelWorkerPool({ size: 2 });
  t.equal(pool.workerCount, 2);
  const inFlight = t.rejects(pool.call({ method: 'extractFacts', input: { text: 'Marie Curie was a physicist.', chunkIndex: 0 } }), {
    name: 'ModelCallError',
    message: /closed during the call/,
  });
  await pool.close();
  await inFlight;
  await t.rejects(pool.call({ method: 'preloadChat' }), { name: 'ModelCallError', message: /closed/ });
  t.equal(pool.workerCount, 0);
  await pool.close();
});
