import t, { type Test } from 'tap';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { checkWritesBesideTheirEnd, restWriteAnswers } from '../helpers/racedWrites.js';
import { registerUser, startServerNodes } from '../helpers/service.js';

/**
 * Two nodes on one PostgreSQL server: a role granted or revoked through one is in force for the
 * very next request on the other, for sessions and API keys alike. No node caches permissions:
 * each request reads the owner's current assignments.
 */
/** Two API nodes on one scratch PostgreSQL database (`maxConns` connections each), closed when `t` ends. */
async function twoNodes(t: Test, database: string, maxConns = 5) {
  const { nodes } = await startServerNodes(t, database, { maxConns });
  return [nodes[0], nodes[1]] as const;
}

t.test('a role change through one node takes effect on the next request on another', async (t) => {
  const [nodeA, nodeB] = await twoNodes(t, 'factlog_roles');

  const admin = await registerUser(nodeA, 'admin@example.org');
  const bob = await registerUser(nodeA, 'bob@example.org');
  const repoId = (await nodeA.call('POST', '/api/v1/repositories', { token: admin.token, body: { name: 'Shared' } })).body.id;
  // A key must grant something when it is made: bob can create repositories, and will read facts once he has a role.
  const created = await nodeA.call('POST', '/api/v1/users/me/api-keys', { token: bob.token, body: { name: 'script', scopes: ['facts:read', 'repositories:create'] } });
  t.equal(created.status, 201);
  const key = created.body.key;
  const readOnB = async (token: string) => (await nodeB.call('GET', `/api/v1/repositories/${repoId}/facts`, { token })).status;
  // No role there: told of no repository (404), as for one that does not exist.
  t.equal(await readOnB(bob.token), 404);
  t.equal(await readOnB(key), 404);

  const grant = { user_id: bob.user.id, role: 'reader', domain: `repository:${repoId}` };
  t.equal((await nodeA.call('PUT', '/api/v1/admin/users/roles', { token: admin.token, body: grant })).status, 200);
  t.equal(await readOnB(bob.token), 200, 'the session on node B has the role at once');
  t.equal(await readOnB(key), 200, 'and so has the key');

  t.equal((await nodeA.call('DELETE', '/api/v1/admin/users/roles', { token: admin.token, body: grant })).status, 204);
  t.equal(await readOnB(bob.token), 404, 'revoked on A: refused on B at the next request');
  t.equal(await readOnB(key), 404);
});

/**
 * The last-owner rule across nodes: the check and the change run under an advisory lock of the
 * repository's membership, so two owners stepping down at once through two nodes leave one owner.
 */
t.test('two owners stepping down at once through two nodes leave one of them owner', async (t) => {
  const [nodeA, nodeB] = await twoNodes(t, 'factlog_members');
  await registerUser(nodeA, 'admin@example.org');
  const first = await registerUser(nodeA, 'first@example.org');
  const second = await registerUser(nodeA, 'second@example.org');
  const repoId = (await nodeA.call('POST', '/api/v1/repositories', { token: first.token, body: { name: 'Co-owned' } })).body.id;
  const members = `/api/v1/repositories/${repoId}/members`;
  t.equal((await nodeA.call('PUT', members, { token: first.token, body: { email: 'second@example.org', role: 'owner' } })).status, 200);

  for (let round = 0; round < 3; round++) {
    const replies = await Promise.all([
      nodeA.call('PUT', members, { token: first.token, body: { user_id: first.user.id, role: 'editor' } }),
      nodeB.call('PUT', members, { token: second.token, body: { user_id: second.user.id, role: 'editor' } }),
    ]);
    t.same(replies.map((reply) => reply.status).sort(), [200, 409], `round ${round}: one steps down, the other is the last owner`);
    const listed = (await nodeB.call('GET', members, { token: replies[0].status === 200 ? second.token : first.token })).body.members as Array<{ roles: string[] }>;
    t.same(listed.map((member) => member.roles[0]).sort(), ['editor', 'owner'], 'one owner left');
    // The one who stayed owner makes the other owner again for the next round.
    const [stayed, other] = replies[0].status === 200 ? [second, first] : [first, second];
    t.equal((await nodeA.call('PUT', members, { token: stayed.token, body: { user_id: other.user.id, role: 'owner' } })).status, 200);
  }
});

t.test('a logout through one node fences the commands made with the session on another, in a repository and in none', async (t) => {
  // Each write holds a connection for its locks while it appends with others: six at once need more than five (docs/auth.md, "Cost").
  const [nodeA, nodeB] = await twoNodes(t, 'factlog_credential_end', 20);
  const owner = await registerUser(nodeA, 'grace@example.org');
  const repoId = (await nodeA.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Signed out elsewhere' } })).body.id;
  const types = ['ApiKeyCreated', 'UserProfileUpdated', 'InvestigationCreated'];
  for (let round = 0; round < 3; round++) {
    const session = (await nodeA.call('POST', '/api/v1/auth/login', { body: { email: 'grace@example.org', password: 'correct horse battery' } })).body as { token: string };
    const id = (kind: string, n: number) => `elsewhere-${round}-${kind}-${n}`;
    const writes = [0, 1].flatMap((n) => [
      {
        name: id('api-key', n),
        answer: nodeA.call('POST', '/api/v1/users/me/api-keys', { token: session.token, body: { name: id('api-key', n), scopes: ['facts:read'] }, headers: { 'x-request-id': id('api-key', n) } }),
        wrote: (event: RecordedEvent) => event.type === 'ApiKeyCreated' && event.correlationId === id('api-key', n),
      },
      {
        name: id('profile', n),
        answer: nodeA.call('PUT', '/api/v1/users/me', { token: session.token, body: { name: id('profile', n) } }),
        wrote: (event: RecordedEvent) => event.type === 'UserProfileUpdated' && (event.data as { name: string | null }).name === id('profile', n),
      },
      {
        name: id('investigation', n),
        answer: nodeA.call('POST', `/api/v1/repositories/${repoId}/investigations`, { token: session.token, body: { title: id('investigation', n) }, headers: { 'x-request-id': id('investigation', n) } }),
        wrote: (event: RecordedEvent) => event.type === 'InvestigationCreated' && event.correlationId === id('investigation', n),
      },
    ]);
    // The logout is answered by node B while node A writes.
    await checkWritesBesideTheirEnd(t, {
      end: () => nodeB.call('POST', '/api/v1/auth/logout', { token: session.token }).then((loggedOut) => t.equal(loggedOut.status, 204)),
      readLog: () => nodeB.context.store.readAll({ types, limit: 100_000 }),
      writes,
      ...restWriteAnswers,
    });
  }
});
