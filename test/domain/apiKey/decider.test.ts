import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { apiKeyDecider, type ApiKeyCommand, type ApiKeyEvent } from '../../../src/domain/apiKey/decider.js';

const create: ApiKeyCommand = {
  type: 'CreateApiKey',
  ownerId: 'u1',
  name: '  ci script ',
  scopes: ['sources:*', 'facts:read', 'facts:read'],
  repositoryId: 'r1',
  expiresAt: '2027-01-01T00:00:00.000Z',
};
const created: ApiKeyEvent = {
  type: 'ApiKeyCreated',
  data: { owner_id: 'u1', name: 'ci script', scopes: ['facts:read', 'sources:*'], repository_id: 'r1', expires_at: '2027-01-01T00:00:00.000Z' },
};
const revoked: ApiKeyEvent = { type: 'ApiKeyRevoked', data: { reason: 'deleted by its owner' } };
const codeOf = (events: ApiKeyEvent[], command: ApiKeyCommand) => spec(apiKeyDecider).given(events).when(command).thenThrows(DomainError).code;

t.test('a key is created once, with its name trimmed and its scopes sorted without duplicates', async (t) => {
  t.same(spec(apiKeyDecider).given([]).when(create).events(), [created]);
  t.equal(codeOf([created], create), 'conflict');
});

t.test('a key needs a name and known permission patterns', async (t) => {
  t.equal(codeOf([], { ...create, name: '   ' }), 'invalid');
  t.equal(codeOf([], { ...create, name: 'x'.repeat(101) }), 'invalid');
  t.equal(codeOf([], { ...create, scopes: [] }), 'invalid');
  const unknown = spec(apiKeyDecider).given([]).when({ ...create, scopes: ['facts:read', 'facts:fly', 'mcp'] }).thenThrows(DomainError);
  t.equal(unknown.code, 'invalid');
  t.match(unknown.message, /'facts:fly', 'mcp'/);
  const tooMany = spec(apiKeyDecider).given([]).when({ ...create, scopes: Array.from({ length: 51 }, (_, i) => `object${i}:read`) }).thenThrows(DomainError);
  t.match(tooMany.message, /at most 50 scopes/);
  t.same(spec(apiKeyDecider).given([]).when({ ...create, scopes: ['*:read'] }).events()[0].data, { ...created.data, scopes: ['*:read'] });
});

t.test('a name is counted in characters, as the route schema counts it', async (t) => {
  const name = '🔑'.repeat(100);
  t.same(spec(apiKeyDecider).given([]).when({ ...create, name }).events(), [{ type: 'ApiKeyCreated', data: { ...created.data, name } }], '100 emoji (200 UTF-16 units) are fine');
  t.equal(codeOf([], { ...create, name: `${name}x` }), 'invalid', '101 characters are not');
});

t.test('only the owner revokes a live key; to anyone else, and after revocation, it does not exist', async (t) => {
  t.same(spec(apiKeyDecider).given([created]).when({ type: 'RevokeApiKey', requestedBy: 'u1', reason: 'deleted by its owner' }).events(), [revoked]);
  t.equal(codeOf([created], { type: 'RevokeApiKey', requestedBy: 'u2', reason: 'x' }), 'not_found');
  t.equal(codeOf([created, revoked], { type: 'RevokeApiKey', requestedBy: 'u1', reason: 'x' }), 'not_found');
  t.equal(codeOf([], { type: 'RevokeApiKey', requestedBy: 'u1', reason: 'x' }), 'not_found');
});
