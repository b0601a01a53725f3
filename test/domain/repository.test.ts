import t from 'tap';
import { DomainError } from '../../src/domain/decider.js';
import { spec } from '../../src/domain/testing.js';
import { repositoryDecider, type RepositoryEvent } from '../../src/domain/repository/decider.js';

const create = { type: 'CreateRepository', name: ' Physics ', slug: 'physics', description: '', preset: 'general', tier: 'shared', acceptedPromptsetHashes: [], registryId: null } as const;
const created: RepositoryEvent = {
  type: 'RepositoryCreated',
  data: { name: 'Physics', slug: 'physics', description: '', preset: 'general', tier: 'shared', accepted_promptset_hashes: [], registry_id: null },
};
const given = spec(repositoryDecider).given;

t.test('create', async (t) => {
  t.same(given([]).when({ ...create, acceptedPromptsetHashes: [] }).events(), [created]);
  t.equal(given([created]).when({ ...create, acceptedPromptsetHashes: [] }).thenThrows(DomainError).code, 'conflict');
  t.equal(given([]).when({ ...create, acceptedPromptsetHashes: [], preset: 'x' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([]).when({ ...create, acceptedPromptsetHashes: [], slug: 'No Slug' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([]).when({ ...create, acceptedPromptsetHashes: [], name: '   ' }).thenThrows(DomainError).code, 'invalid');
});

t.test('update records only changes; delete is final', async (t) => {
  t.same(given([created]).when({ type: 'UpdateRepository', name: 'Physics' }).events(), [], 'no change, no event');
  t.same(given([created]).when({ type: 'UpdateRepository', name: 'Optics', description: '' }).events(), [
    { type: 'RepositoryUpdated', data: { name: 'Optics', slug: null, description: null, accepted_promptset_hashes: null } },
  ]);
  const deleted: RepositoryEvent = { type: 'RepositoryDeleted', data: { reason: null } };
  t.same(given([created]).when({ type: 'DeleteRepository' }).events(), [deleted]);
  t.same(given([created, deleted]).when({ type: 'DeleteRepository' }).events(), [], 'deleting twice is a no-op');
  t.equal(given([created, deleted]).when({ type: 'UpdateRepository', name: 'x' }).thenThrows(DomainError).code, 'gone');
  t.equal(given([]).when({ type: 'UpdateRepository', name: 'x' }).thenThrows(DomainError).code, 'not_found');
});
