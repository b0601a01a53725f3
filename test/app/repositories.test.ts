import t from 'tap';
import { createApplication } from '../../src/app/application.js';
import { createRepositoryService, slugify } from '../../src/app/repositories.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { racingCommandBus } from '../helpers/racedWrites.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;

t.before(async () => {
  harness = await startTestApplication();
  ({ owner, stranger } = harness);
});
t.teardown(() => harness.close());

t.test('create: the caller becomes owner, and the answer shows it', async (t) => {
  const created = await harness.app.repositories.create(owner, { name: 'Café Notes' });
  t.match(created, { name: 'Café Notes', slug: slugify('Café Notes'), roles: ['owner'], created_by: owner.userId, accepted_promptset_hashes: [] });
  await rejectsWith(t, harness.app.repositories.create(owner, { name: 'Again', slug: created.slug }), 'conflict', /taken/);
  await rejectsWith(t, harness.app.repositories.create({ ...owner, scopes: ['facts:read'] }, { name: 'Scoped' }), 'forbidden', /repositories:create/);
});

t.test("create: a slug never takes another repository's id", async (t) => {
  const first = await harness.app.repositories.create(owner, { name: 'First' });
  await rejectsWith(t, harness.app.repositories.create(stranger, { name: 'Squat', slug: first.id }), 'invalid', /shape of a repository id/);
  const named = await harness.app.repositories.create(stranger, { name: first.id });
  t.equal(named.slug, `repository-${first.id}`, 'a name written as an id gets a prefixed slug');
  owner = await harness.refreshed(owner);
  t.equal((await harness.app.repositories.get(owner, { repository: first.id })).name, 'First');
});

t.test('update: a writer renames; the promptset whitelist needs repositories:manage', async (t) => {
  const { id } = await harness.app.repositories.create(owner, { name: 'Shared' });
  owner = await harness.refreshed(owner);
  t.match(await harness.app.repositories.update(owner, { repository: id, description: 'notes' }), { id, description: 'notes', roles: ['owner'] });
  const hash = 'a'.repeat(64);
  t.same((await harness.app.repositories.update(owner, { repository: id, accepted_promptset_hashes: [hash] })).accepted_promptset_hashes, [hash]);
  // A token scoped to repositories:write (no built-in role holds write without manage).
  const writer = { ...owner, scopes: ['repositories:write'] };
  t.match(await harness.app.repositories.update(writer, { repository: id, name: 'Renamed' }), { name: 'Renamed' });
  await rejectsWith(t, harness.app.repositories.update(writer, { repository: id, accepted_promptset_hashes: [] }), 'forbidden', /repositories:manage/);
  await rejectsWith(t, harness.app.repositories.remove(writer, { repository: id }), 'forbidden', /repositories:delete/);
  await rejectsWith(t, harness.app.repositories.update(stranger, { repository: id, name: 'Mine' }), 'not_found', /^repository not found$/);
});

t.test('remove: the repository and its slug are gone', async (t) => {
  const { id, slug } = await harness.app.repositories.create(owner, { name: 'Short lived', slug: 'short-lived' });
  owner = await harness.refreshed(owner);
  await harness.app.repositories.remove(owner, { repository: slug });
  await rejectsWith(t, harness.app.repositories.get(owner, { repository: id }), 'not_found');
  t.equal((await harness.app.repositories.create(owner, { name: 'Reborn', slug: 'short-lived' })).slug, 'short-lived', 'the slug is free again');
});

t.test('renames sent together: the slug left is the only one reserved, the others are free again', async (t) => {
  const knex = harness.service.context.db.knex;
  for (let round = 0; round < 3; round++) {
    const { id } = await harness.app.repositories.create(owner, { name: `Renamed twice ${round}` });
    owner = await harness.refreshed(owner);
    const [left, right] = [`left-${round}`, `right-${round}`];
    const renames = await Promise.allSettled([left, right].map((slug) => harness.app.repositories.update(owner, { repository: id, slug })));
    t.same(renames.map((rename) => rename.status), ['fulfilled', 'fulfilled'], 'each rename is made, one after the other');
    const { slug } = await harness.app.repositories.get(owner, { repository: id });
    t.ok([left, right].includes(slug));
    t.same(await knex('slug_reservations').where({ repository_id: id }).pluck('slug'), [slug], 'only the slug it has stays reserved');
    const other = slug === left ? right : left;
    t.equal((await harness.app.repositories.create(stranger, { name: 'Taker', slug: other })).slug, other, 'the slug renamed past is free');
    t.equal((await harness.app.repositories.create(stranger, { name: 'Taker', slug: `renamed-twice-${round}` })).slug, `renamed-twice-${round}`, 'and so is the first one');

    const same = await Promise.allSettled([0, 1].map(() => harness.app.repositories.update(owner, { repository: id, slug: `same-${round}` })));
    t.same(same.map((rename) => rename.status), ['fulfilled', 'fulfilled'], 'the same rename twice: the second finds it made, not a slug taken');
    t.same(await knex('slug_reservations').where({ repository_id: id }).pluck('slug'), [`same-${round}`]);
  }
});

t.test('an edit stored before the repository is deleted answers the edit, not 404; the deletion then lands', async (t) => {
  const { service, owner } = harness;
  const { id } = await harness.app.repositories.create(owner, { name: 'Edited then deleted' });
  const ownerNow = await harness.refreshed(owner);
  const { commands } = service.context;
  const racing = racingCommandBus(commands, 'RepositoryUpdated', () => app.repositories.remove(ownerNow, { repository: id }));
  const repositories = createRepositoryService({ db: service.context.db, commands: racing.bus, defaultPreset: service.context.config.default_repository_preset });
  const app = createApplication({ ...service.context, commands: racing.bus, repositories });
  const edited = await app.repositories.update(ownerNow, { repository: id, name: 'Renamed' }).catch((error: unknown) => error);
  t.match(edited, { id, name: 'Renamed' }, 'the edit was stored before the deletion: it is answered');
  t.equal(await racing.raced(), undefined, 'the deletion then succeeds');
  await rejectsWith(t, harness.app.repositories.get(ownerNow, { repository: id }), 'not_found');
});
