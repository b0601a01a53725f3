import t, { type Test } from 'tap';
import type { RecordedEvent } from '../../../src/eventstore/envelope.js';
import { migrateProjectionStreamPositions } from '../../../src/projection/busRunner.js';
import { migrateProjectionCheckpoints } from '../../../src/projection/runner.js';
import { appliedThrough, awaitReadModels, readModelsApplied } from '../../../src/pipeline/stages/readModelLag.js';
import { openTestPglite } from '../../helpers/pglite.js';

const trigger = (type: string, globalPosition: number, streamVersion: number): RecordedEvent => ({
  eventId: '00000000-0000-4000-8000-000000000001',
  streamId: 'source-s1',
  streamVersion,
  globalPosition,
  type,
  schemaVersion: 1,
  data: {},
  repositoryId: 'r1',
  actor: 'system:test',
  causationId: null,
  correlationId: null,
  occurredAt: new Date(0).toISOString(),
});
const facts = { name: 'facts', eventTypes: ['FactsExtracted', 'FactMergedInto'] };
const concepts = { name: 'concepts', eventTypes: ['ConceptsExtracted', 'FactMergedInto'] };

t.test('log-fed projections: the global position decides, whatever the trigger type', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), false, 'no checkpoint table yet: behind');
  await migrateProjectionCheckpoints(db.knex);
  await db.knex('projection_checkpoints').insert([{ name: 'facts', position: 10 }, { name: 'concepts', position: 9 }]);
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), false, 'concepts is one behind');
  await db.knex('projection_checkpoints').where({ name: 'concepts' }).update({ position: 12 });
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), true);
  const signal = new AbortController().signal;
  t.equal(await awaitReadModels(db.knex, [facts, concepts], { trigger: trigger('ConceptsExtracted', 11, 4), scheduled: true, signal }, { timeoutMs: 60_000 }), true, 'a scheduled job never waits');
  t.equal(await awaitReadModels(db.knex, [facts, concepts], { trigger: trigger('ConceptsExtracted', 11, 4), scheduled: false, signal }, { timeoutMs: 50, pollMs: 10 }), false, 'gives up after its wait');
  // A knex builder runs when awaited: the projections catch up while the wait polls.
  setTimeout(() => db.knex('projection_checkpoints').update({ position: 20 }).then(() => undefined, () => undefined), 30);
  t.equal(await awaitReadModels(db.knex, [facts, concepts], { trigger: trigger('ConceptsExtracted', 11, 4), scheduled: false, signal }, { timeoutMs: 60_000, pollMs: 10 }), true, 'sees the projections catch up');
  const aborted = new AbortController();
  aborted.abort(new Error('job timed out'));
  await t.rejects(awaitReadModels(db.knex, [facts, concepts], { trigger: trigger('ConceptsExtracted', 99, 9), scheduled: false, signal: aborted.signal }, { timeoutMs: 60_000 }), /job timed out/);
});

/** A read-model database whose projections are fed from the bus, with these stream positions. */
async function busFed(t: Test, positions: Array<{ projection: string; stream_id: string; stream_version: number; global_position: number }>) {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await migrateProjectionStreamPositions(db.knex);
  await db.knex('projection_stream_positions').insert(positions);
  return db;
}

t.test('bus-fed projections: the stream version of the projections that handle the trigger', async (t) => {
  const db = await busFed(t, [
    // facts handles no ConceptsExtracted: its version on the source stream stays at its FactsExtracted.
    { projection: 'facts', stream_id: 'source-s1', stream_version: 2, global_position: 5 },
    { projection: 'concepts', stream_id: 'source-s1', stream_version: 2, global_position: 5 },
  ]);
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), false, 'concepts has not applied version 3');
  await db.knex('projection_stream_positions').where({ projection: 'concepts' }).update({ stream_version: 3 });
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), true, 'facts is not waited for on a type it does not handle');
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('FactMergedInto', 10, 3)), false, 'but is on one it handles');
});

t.test('bus-fed projections: one that handles an earlier event of the trigger\'s stream is waited for until it applied one', async (t) => {
  // Both bus-fed (rows on other streams); concepts has applied the trigger, facts nothing of its source yet.
  const db = await busFed(t, [
    { projection: 'facts', stream_id: 'source-s0', stream_version: 4, global_position: 3 },
    { projection: 'concepts', stream_id: 'source-s1', stream_version: 3, global_position: 10 },
  ]);
  const factsFirst = { ...facts, earlierOnTriggerStream: true };
  t.equal(await readModelsApplied(db.knex, [facts, concepts], trigger('ConceptsExtracted', 10, 3)), true, 'without it, facts is not waited for');
  t.equal(await readModelsApplied(db.knex, [factsFirst, concepts], trigger('ConceptsExtracted', 10, 3)), false, 'the source\'s facts are not in yet');
  await db.knex('projection_stream_positions').insert({ projection: 'facts', stream_id: 'source-s1', stream_version: 0, global_position: 4 });
  t.equal(await readModelsApplied(db.knex, [factsFirst, concepts], trigger('ConceptsExtracted', 10, 3)), true, 'once it applied the source\'s FactsExtracted');
});

t.test('appliedThrough: the least global checkpoint of the projections, or null where one keeps none', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  t.equal(await appliedThrough(db.knex, [facts, concepts]), null, 'no checkpoint table yet');
  await migrateProjectionCheckpoints(db.knex);
  await db.knex('projection_checkpoints').insert([{ name: 'facts', position: 40 }]);
  t.equal(await appliedThrough(db.knex, [facts, concepts]), null, 'concepts keeps no global position (fed from the bus)');
  await db.knex('projection_checkpoints').insert([{ name: 'concepts', position: 25 }]);
  t.equal(await appliedThrough(db.knex, [facts, concepts]), 25, 'the one further behind');
  t.equal(await appliedThrough(db.knex, [facts]), 40);
  t.equal(await appliedThrough(db.knex, []), null, 'no projection named: no position to give');
});
