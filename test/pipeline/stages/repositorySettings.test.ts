import t from 'tap';
import { migrateReadModels } from '../../../projections/migrations/index.js';
import { isLiveRepository, loadRepositorySettings } from '../../../src/pipeline/stages/repositorySettings.js';
import { PermanentJobError } from '../../../src/pipeline/types.js';
import { openMemoryPglite } from '../../eventstore/contract.js';

const at = new Date('2026-11-27T12:00:00Z');
const repository = (id: string, preset: string, deleted = false) => ({
  id,
  name: id,
  slug: id,
  preset,
  tier: 'private',
  created_by: 'user-1',
  created_at: at,
  updated_at: at,
  deleted_at: deleted ? at : null,
});

t.test('repository settings: reads of one moment share a statement, and each sees the row after its call', async (t) => {
  const db = await openMemoryPglite();
  t.teardown(() => db.close());
  await migrateReadModels(db.knex);
  await db.knex('repositories').insert([repository('repo-a', 'general'), repository('repo-b', 'research'), repository('repo-gone', 'general', true)]);
  await db.knex('repositories').where({ id: 'repo-b' }).update({ custom_contexts: JSON.stringify([{ name: 'lab', description: 'Lab work' }]) });

  const statements: string[] = [];
  const count = (query: { sql: string }) => statements.push(query.sql);
  db.knex.on('query', count);
  const [a, b, a2, live, gone, missing] = await Promise.all([
    loadRepositorySettings(db.knex, 'repo-a'),
    loadRepositorySettings(db.knex, 'repo-b'),
    loadRepositorySettings(db.knex, 'repo-a'),
    isLiveRepository(db.knex, 'repo-b'),
    isLiveRepository(db.knex, 'repo-gone'),
    isLiveRepository(db.knex, 'repo-missing'),
  ]);
  db.knex.off('query', count);
  t.ok(statements.length <= 2, `six reads in ${statements.length} statements (the first alone, the rest together)`);
  t.ok(b.contexts.some((context) => context.name === 'lab'), "repo-b's own contexts");
  t.notOk(a.contexts.some((context) => context.name === 'lab'), "repo-a's are not repo-b's");
  t.same(a2, a, 'the same repository read twice: the same settings');
  t.same([live, gone, missing], [true, false, false], 'live, deleted, missing');

  await t.rejects(loadRepositorySettings(db.knex, 'repo-gone'), new PermanentJobError('repository repo-gone was deleted'));
  await t.rejects(loadRepositorySettings(db.knex, 'repo-missing'), new PermanentJobError('repository repo-missing is not in the read model'));

  // A read sent while another is out goes in the next statement: it sees a change made before it.
  const first = loadRepositorySettings(db.knex, 'repo-a');
  await db.knex('repositories').where({ id: 'repo-a' }).update({ custom_contexts: JSON.stringify([{ name: 'studio', description: 'Studio work' }]) });
  const after = await loadRepositorySettings(db.knex, 'repo-a');
  await first;
  t.ok(after.contexts.some((context) => context.name === 'studio'), 'a read after an update sees it');

  await db.knex.transaction(async (trx) => {
    await trx('repositories').where({ id: 'repo-a' }).update({ deleted_at: at });
    t.equal(await isLiveRepository(trx, 'repo-a'), false, 'inside a transaction, the transaction reads it');
    throw new Error('roll back');
  }).catch(() => undefined);
  t.equal(await isLiveRepository(db.knex, 'repo-a'), true, 'and the rolled-back change is not seen outside');
});
