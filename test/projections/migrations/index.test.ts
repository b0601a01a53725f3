import t from 'tap';
import { migrateReadModels } from '../../../projections/migrations/index.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';

t.test('019: the role assignments of repositories deleted before it go, the others stay', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const now = new Date();
  const repository = (id: string, deleted: boolean) => ({ id, name: id, slug: id, preset: 'default', tier: 'local', created_by: 'u1', created_at: now, updated_at: now, deleted_at: deleted ? now : null });
  await db.knex('repositories').insert([repository('gone', true), repository('live', false)]);
  await db.knex('role_assignments').insert([
    { user_id: 'u1', role: 'owner', domain: 'repository:gone', granted_at: now },
    { user_id: 'u2', role: 'reader', domain: 'repository:gone', granted_at: now },
    { user_id: 'u1', role: 'owner', domain: 'repository:live', granted_at: now },
    { user_id: 'u1', role: 'user', domain: 'system', granted_at: now },
  ]);
  await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }).delete();

  t.same(await migrateReadModels(db.knex), ['019_role_assignments_of_deleted_repositories']);
  const left = await db.knex('role_assignments').orderBy(['domain', 'user_id']).select('user_id', 'role', 'domain');
  t.same(left, [
    { user_id: 'u1', role: 'owner', domain: 'repository:live' },
    { user_id: 'u1', role: 'user', domain: 'system' },
  ]);
});

t.test('a database a newer factlog migrated is refused before any migration runs, naming the unknown ids', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }).delete();
  await db.knex('schema_migrations').insert([{ id: '999_from_the_future' }, { id: '998_also_newer' }]);

  await t.rejects(migrateReadModels(db.knex), {
    name: 'NewerSchemaError',
    message: /^the database was migrated by a newer factlog: it holds migrations 998_also_newer, 999_from_the_future, which this version does not know/,
  });
  t.same(await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }), [], 'the missing known migration was not run');
});
