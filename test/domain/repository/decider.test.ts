import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { repositoryDecider, type RepositoryEvent } from '../../../src/domain/repository/decider.js';

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
  // `{repoID}` takes an id or a slug: a slug with an id's shape could name another repository.
  const idShaped = given([]).when({ ...create, acceptedPromptsetHashes: [], slug: '0f6c2a4e-1b3d-4c5e-8f7a-9b0c1d2e3f4a' }).thenThrows(DomainError);
  t.match(idShaped, { code: 'invalid', message: /shape of a repository id/ });
  t.equal(given([created]).when({ type: 'UpdateRepository', slug: '0f6c2a4e-1b3d-4c5e-8f7a-9b0c1d2e3f4a' }).thenThrows(DomainError).code, 'invalid', 'nor by a rename');
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

t.test('a name is counted in characters, as the route schema counts it: 200 emoji are 200 characters', async (t) => {
  const emoji = '🧪'.repeat(200);
  t.same(given([]).when({ ...create, acceptedPromptsetHashes: [], name: emoji }).events(), [{ ...created, data: { ...created.data, name: emoji } }], '200 emoji (400 UTF-16 units) are fine');
  t.equal(given([]).when({ ...create, acceptedPromptsetHashes: [], name: `${emoji}x` }).thenThrows(DomainError).code, 'invalid', '201 characters are not');
  t.same(given([created]).when({ type: 'UpdateRepository', name: emoji }).events().length, 1, 'a rename too');
});

t.test('a prompt and a context description are counted in characters', async (t) => {
  t.same(given([created]).when({ type: 'SetPrompts', prompts: { synthesis: '🧪'.repeat(20_000) } }).events().length, 1, '20000 emoji are 20000 characters');
  t.match(given([created]).when({ type: 'SetPrompts', prompts: { synthesis: '🧪'.repeat(20_001) } }).thenThrows(DomainError).message, /longer than 20000/);
  const description = '🧪'.repeat(500);
  t.same(given([created]).when({ type: 'SetCustomContexts', customContexts: [{ name: 'lab', description }] }).events()[0]?.data, { custom_contexts: [{ name: 'lab', description }] });
  t.match(given([created]).when({ type: 'SetCustomContexts', customContexts: [{ name: 'lab', description: `${description}x` }] }).thenThrows(DomainError).message, /longer than 500/);
});

const deletedRepository: RepositoryEvent = { type: 'RepositoryDeleted', data: { reason: null } };

t.test('prompt overrides: set, replace, remove', async (t) => {
  t.same(given([created]).when({ type: 'SetPrompts', prompts: { synthesis: 'Write briefly.', fact_extraction: 'Extract.' } }).events(), [
    { type: 'RepositoryPromptsChanged', data: { prompts: { fact_extraction: 'Extract.', synthesis: 'Write briefly.' } } },
  ], 'the full map, in phase order');
  const changed: RepositoryEvent = { type: 'RepositoryPromptsChanged', data: { prompts: { fact_extraction: 'Extract.', synthesis: 'Write briefly.' } } };
  t.same(given([created, changed]).when({ type: 'SetPrompts', prompts: { synthesis: null, posture: 'Be neutral.' } }).events(), [
    { type: 'RepositoryPromptsChanged', data: { prompts: { fact_extraction: 'Extract.', posture: 'Be neutral.' } } },
  ], 'null removes an override, others stay');
  t.same(given([created, changed]).when({ type: 'SetPrompts', prompts: { synthesis: 'Write briefly.' } }).events(), [], 'no change, no event');
  t.same(given([created]).when({ type: 'SetPrompts', prompts: { refinement: null } }).events(), [], 'removing an absent override');
  t.same(given([created]).when({ type: 'SetPrompts', prompts: {} }).events(), []);
  const bad: Array<[Record<string, string | null>, RegExp]> = [
    [{ poetry: 'x' }, /unknown prompt phase 'poetry'/],
    [{ synthesis: 'x'.repeat(20_001) }, /longer than 20000/],
    [{ synthesis: '   ' }, /non-empty/],
  ];
  for (const [prompts, message] of bad) {
    const error = given([created]).when({ type: 'SetPrompts', prompts }).thenThrows(DomainError);
    t.equal(error.code, 'invalid');
    t.match(error.message, message);
  }
  t.same(given([created]).when({ type: 'SetPrompts', prompts: { image_picker: 'x'.repeat(20_000) } }).events().length, 1, '20000 characters are fine');
  t.equal(given([]).when({ type: 'SetPrompts', prompts: { synthesis: 'x' } }).thenThrows(DomainError).code, 'not_found');
  t.equal(given([created, deletedRepository]).when({ type: 'SetPrompts', prompts: { synthesis: 'x' } }).thenThrows(DomainError).code, 'gone');
  const state = [created, changed].reduce(repositoryDecider.evolve, repositoryDecider.initialState());
  t.match(state, { preset: 'general', promptOverrides: { fact_extraction: 'Extract.', synthesis: 'Write briefly.' }, customContexts: [] });
});

t.test('custom contexts are normalised and checked', async (t) => {
  t.same(given([created]).when({ type: 'SetCustomContexts', customContexts: [{ name: ' Instrument ', description: ' A device. ' }] }).events(), [
    { type: 'RepositoryContextsChanged', data: { custom_contexts: [{ name: 'instrument', description: 'A device.' }] } },
  ]);
  const changed: RepositoryEvent = { type: 'RepositoryContextsChanged', data: { custom_contexts: [{ name: 'instrument', description: 'A device.' }] } };
  t.same(given([created, changed]).when({ type: 'SetCustomContexts', customContexts: [{ name: 'instrument', description: 'A device.' }] }).events(), [], 'unchanged');
  t.same(given([created, changed]).when({ type: 'SetCustomContexts', customContexts: [] }).events(), [
    { type: 'RepositoryContextsChanged', data: { custom_contexts: [] } },
  ], 'all removed');
  const bad = [
    [{ name: 'person', description: '' }],
    [{ name: 'a', description: '' }, { name: 'A', description: '' }],
    [{ name: '', description: '' }],
    [{ name: 'bad/name', description: '' }],
    [{ name: 'x', description: 'd'.repeat(501) }],
    Array.from({ length: 51 }, (_, index) => ({ name: `c${index}`, description: '' })),
  ];
  for (const customContexts of bad) {
    t.equal(given([created]).when({ type: 'SetCustomContexts', customContexts }).thenThrows(DomainError).code, 'invalid', JSON.stringify(customContexts).slice(0, 60));
  }
  const state = [created, changed].reduce(repositoryDecider.evolve, repositoryDecider.initialState());
  t.match(state, { customContexts: [{ name: 'instrument', description: 'A device.' }] });
});

t.test('a context migration targets an allowed context', async (t) => {
  const scientific: RepositoryEvent = { type: 'RepositoryCreated', data: { ...created.data, preset: 'scientific' } as never };
  const customs: RepositoryEvent = { type: 'RepositoryContextsChanged', data: { custom_contexts: [{ name: 'instrument', description: '' }] } };
  t.same(given([scientific]).when({ type: 'RequestContextMigration', fromContext: ' topic ', toContext: 'Method' }).events(), [
    { type: 'ContextMigrationRequested', data: { from_context: 'topic', to_context: 'method' } },
  ], 'the target is named as the repository spells it');
  t.same(given([scientific, customs]).when({ type: 'RequestContextMigration', fromContext: 'method', toContext: 'instrument' }).events().length, 1, 'to a custom context');
  t.equal(given([scientific]).when({ type: 'RequestContextMigration', fromContext: 'topic', toContext: 'instrument' }).thenThrows(DomainError).code, 'invalid', 'not (yet) a context here');
  t.equal(given([scientific]).when({ type: 'RequestContextMigration', fromContext: 'method', toContext: 'award' }).thenThrows(DomainError).code, 'invalid', 'a level the preset does not pick');
  t.equal(given([scientific]).when({ type: 'RequestContextMigration', fromContext: 'METHOD', toContext: 'method' }).thenThrows(DomainError).code, 'invalid', 'from = to');
  t.equal(given([scientific]).when({ type: 'RequestContextMigration', fromContext: ' ', toContext: 'method' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([created]).when({ type: 'RequestContextMigration', fromContext: 'topic', toContext: 'award' }).events().length, 1, 'general allows every level');
  t.equal(given([created, deletedRepository]).when({ type: 'RequestContextMigration', fromContext: 'topic', toContext: 'award' }).thenThrows(DomainError).code, 'gone');
});

t.test('relation changes are recorded with ordered pairs', async (t) => {
  t.same(given([created]).when({ type: 'RecordRelationChanges', changes: [] }).events(), [], 'nothing changed, nothing recorded');
  t.same(
    given([created]).when({ type: 'RecordRelationChanges', changes: [{ concept_a: 'b', concept_b: 'a', shared_fact_count: 3 }, { concept_a: 'a', concept_b: 'c', shared_fact_count: 0 }] }).events(),
    [{ type: 'ConceptRelationsRefreshed', data: { changes: [{ concept_a: 'a', concept_b: 'b', shared_fact_count: 3 }, { concept_a: 'a', concept_b: 'c', shared_fact_count: 0 }] } }],
  );
  for (const change of [
    { concept_a: 'a', concept_b: 'a', shared_fact_count: 1 },
    { concept_a: '', concept_b: 'a', shared_fact_count: 1 },
    { concept_a: 'a', concept_b: 'b', shared_fact_count: -1 },
    { concept_a: 'a', concept_b: 'b', shared_fact_count: 1.5 },
  ]) {
    t.equal(given([created]).when({ type: 'RecordRelationChanges', changes: [change] }).thenThrows(DomainError).code, 'invalid', JSON.stringify(change));
  }
  t.equal(
    given([created]).when({ type: 'RecordRelationChanges', changes: [{ concept_a: 'a', concept_b: 'b', shared_fact_count: 1 }, { concept_a: 'b', concept_b: 'a', shared_fact_count: 2 }] }).thenThrows(DomainError).code,
    'invalid',
    'a pair listed twice',
  );
  t.same(given([created, deletedRepository]).when({ type: 'RecordRelationChanges', changes: [{ concept_a: 'a', concept_b: 'b', shared_fact_count: 1 }] }).events(), [], 'a deleted repository records nothing');
  t.equal(given([]).when({ type: 'RecordRelationChanges', changes: [] }).thenThrows(DomainError).code, 'not_found');
});
