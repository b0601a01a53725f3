import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let alice: Principal;

t.before(async () => {
  harness = await startTestApplication();
  alice = harness.owner;
});
t.teardown(() => harness.close());

t.test('projections: status and rebuild for administrators only', async (t) => {
  const { projections } = await harness.app.projections.status(harness.admin);
  t.ok(projections.some((projection) => projection.name === 'users'));
  await rejectsWith(t, harness.app.projections.status(alice), 'forbidden', /projections:read/);
  await rejectsWith(t, harness.app.projections.rebuild(harness.admin, { name: 'no-such-projection' }), 'not_found');
  await rejectsWith(t, harness.app.projections.rebuild(alice, { name: 'users' }), 'forbidden', /projections:manage/);
});
