import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { normalizeEmail, userDecider, type UserEvent } from '../../../src/domain/user/decider.js';

const registered: UserEvent = { type: 'UserRegistered', data: { email: 'ada@example.org', name: 'Ada' } };
const given = spec(userDecider).given;

t.test('users and roles', async (t) => {
  t.same(given([]).when({ type: 'RegisterUser', email: ' Ada@Example.ORG ', name: 'Ada ' }).events(), [registered]);
  // NFKC, then lower case: fullwidth letters and compatibility forms are the address they show.
  t.same(given([]).when({ type: 'RegisterUser', email: 'ＡＤＡ@ｅｘａｍｐｌｅ.org', name: 'Ada' }).events(), [registered]);
  t.equal(normalizeEmail('\ufb01le@example.org'), 'file@example.org', 'the fi ligature is two letters');
  t.equal(given([]).when({ type: 'RegisterUser', email: 'nope', name: '' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([registered]).when({ type: 'RegisterUser', email: 'a@b.c', name: '' }).thenThrows(DomainError).code, 'conflict');
  const grant = { type: 'RoleGranted', data: { role: 'owner', domain: 'repository:r1' } } as UserEvent;
  t.same(given([registered]).when({ type: 'GrantRole', role: 'owner', domain: 'repository:r1' }).events(), [grant]);
  t.same(given([registered, grant]).when({ type: 'GrantRole', role: 'owner', domain: 'repository:r1' }).events(), [], 'granting twice is a no-op');
  t.same(given([registered, grant]).when({ type: 'RevokeRole', role: 'owner', domain: 'repository:r1' }).events(), [
    { type: 'RoleRevoked', data: { role: 'owner', domain: 'repository:r1' } },
  ]);
  t.equal(given([registered]).when({ type: 'RevokeRole', role: 'owner', domain: 'repository:r1' }).thenThrows(DomainError).code, 'not_found');
  t.same(given([registered]).when({ type: 'UpdateProfile', name: 'Ada' }).events(), []);
  t.same(given([registered]).when({ type: 'UpdateProfile', email: 'ADA2@example.org' }).events(), [
    { type: 'UserProfileUpdated', data: { email: 'ada2@example.org', name: null } },
  ]);
});
