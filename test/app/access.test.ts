import t from 'tap';
import { authorizeRepository, authorizeSystem, commandMetadata } from '../../src/app/access.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repositoryId: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Access', slug: 'access' });
  ({ owner, stranger, repository: repositoryId } = harness);
});
t.teardown(() => harness.close());

const knex = () => harness.service.context.db.knex;

t.test('a repository is found by id or slug when the principal may', async (t) => {
  t.equal((await authorizeRepository(knex(), owner, repositoryId, 'facts:read')).slug, 'access');
  t.equal((await authorizeRepository(knex(), owner, 'access', 'repositories:delete')).id, repositoryId);
});

t.test("an id names its repository even where an older repository's slug has its shape", async (t) => {
  // Slugs shaped like ids are refused now; a log written before that may still hold one.
  const squat = await harness.app.repositories.create(stranger, { name: 'Squat' });
  await knex()('repositories').where({ id: squat.id }).update({ slug: repositoryId });
  // An update writes the row anew after the squatter's: a scan without an order now meets the squatter first.
  await harness.app.repositories.update(owner, { repository: repositoryId, description: 'rewritten' });
  for (let attempt = 0; attempt < 5; attempt++) {
    t.equal((await authorizeRepository(knex(), owner, repositoryId, 'facts:read')).id, repositoryId);
  }
  await rejectsWith(t, authorizeRepository(knex(), stranger, repositoryId, 'facts:read'), 'not_found', /^repository not found$/);
});

t.test('who may see nothing of a repository is told it is not found, as for a missing one; who may see it, what is denied', async (t) => {
  // A 403 would tell a stranger that the id or slug names a repository.
  for (const idOrSlug of [repositoryId, 'access']) {
    await rejectsWith(t, authorizeRepository(knex(), stranger, idOrSlug, 'facts:read'), 'not_found', /^repository not found$/);
    await rejectsWith(t, authorizeRepository(knex(), stranger, idOrSlug, 'repositories:delete'), 'not_found', /^repository not found$/);
  }
  // A key bound to another repository reaches nothing here either.
  await rejectsWith(t, authorizeRepository(knex(), { ...owner, repositoryId: 'elsewhere' }, repositoryId, 'facts:read'), 'not_found', /^repository not found$/);
  // A scope that covers something here sees the repository: what it lacks is denied.
  await rejectsWith(t, authorizeRepository(knex(), { ...owner, scopes: ['sources:read'] }, repositoryId, 'facts:read'), 'forbidden', /permission denied: facts:read/);
  const reader: Principal = { ...stranger, assignments: [...stranger.assignments, { role: 'reader', domain: `repository:${repositoryId}` }] };
  t.equal((await authorizeRepository(knex(), reader, repositoryId, 'facts:read')).id, repositoryId, 'a reader reads');
  await rejectsWith(t, authorizeRepository(knex(), reader, repositoryId, 'facts:create'), 'forbidden', /permission denied: facts:create/);
  t.equal((await authorizeRepository(knex(), { ...owner, scopes: ['facts:*'] }, repositoryId, 'facts:read')).id, repositoryId, 'a scope that covers');
  t.throws(() => authorizeSystem(owner, 'user:read'), { name: 'DomainError', code: 'forbidden' });
  t.doesNotThrow(() => authorizeSystem(owner, 'repositories:create'), 'every user may create repositories');
  t.throws(() => authorizeSystem({ ...owner, scopes: ['facts:read'] }, 'repositories:create'), { code: 'forbidden' }, 'unless the token is scoped narrower');
});

t.test('a missing or deleted repository is not found, before any permission is told', async (t) => {
  await rejectsWith(t, authorizeRepository(knex(), stranger, 'no-such-repository', 'facts:read'), 'not_found', /repository not found/);
  const doomed = await harness.app.repositories.create(owner, { name: 'Doomed' });
  const ownerNow = await harness.refreshed(owner);
  await harness.app.repositories.remove(ownerNow, { repository: doomed.id });
  await rejectsWith(t, authorizeRepository(knex(), ownerNow, doomed.id, 'repositories:read'), 'not_found');
});

t.test('commands carry the principal as actor and the trace as correlation', async (t) => {
  t.same(commandMetadata(owner, repositoryId, { correlationId: 'req-1' }), { repositoryId, actor: owner.userId, causationId: null, correlationId: 'req-1' });
  t.same(commandMetadata(owner, null), { repositoryId: null, actor: owner.userId, causationId: null, correlationId: null }, 'no trace: no correlation');
});
