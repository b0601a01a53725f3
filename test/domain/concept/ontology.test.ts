import t from 'tap';
import { ONTOLOGY_LEVELS, allowedContexts, findAllowedContext, isOntologyLevel } from '../../../src/domain/concept/ontology.js';
import { repositoryPresets } from '../../../src/domain/repository/presets.js';

const required = ['person', 'organization', 'location', 'event', 'work', 'product', 'technology', 'method', 'field', 'topic',
  'chemical', 'organism', 'disease', 'dataset', 'finding', 'process', 'project', 'policy', 'award'];

t.test('the built-in levels are named and described', async (t) => {
  const names = ONTOLOGY_LEVELS.map((level) => level.name);
  for (const name of required) t.ok(names.includes(name), name);
  t.equal(new Set(names).size, names.length, 'no level twice');
  t.ok(ONTOLOGY_LEVELS.every((level) => level.name === level.name.toLowerCase() && level.description.length > 10 && !level.description.includes('\n')));
  t.ok(isOntologyLevel(' Person '));
  t.notOk(isOntologyLevel('hypothesis'));
});

t.test('every preset context is a built-in level', async (t) => {
  for (const preset of repositoryPresets) {
    for (const context of preset.contexts) t.ok(context === 'all' || isOntologyLevel(context), `${preset.id}: ${context}`);
  }
});

t.test('allowed contexts: preset levels, preset customs, repository customs', async (t) => {
  t.same(allowedContexts('general').map((choice) => choice.name), ONTOLOGY_LEVELS.map((level) => level.name), '`all` is every level');
  const scientific = allowedContexts('scientific', [{ name: 'instrument', description: 'A measuring device.' }]);
  t.same(scientific.map((choice) => choice.name), [
    'method', 'finding', 'organism', 'chemical', 'disease', 'dataset', 'person', 'organization', 'hypothesis', 'instrument',
  ]);
  t.match(scientific.find((choice) => choice.name === 'hypothesis'), { description: /conjecture/ });
  t.match(scientific.at(-1), { name: 'instrument', description: 'A measuring device.' });
  t.same(
    allowedContexts('enterprise', [{ name: 'Customer', description: 'dup' }, { name: 'Person', description: 'dup' }, { name: ' ', description: '' }]).map((c) => c.name),
    ['person', 'organization', 'product', 'process', 'project', 'policy', 'customer'],
    'case-insensitive duplicates and blank names are left out; the first wins',
  );
  t.equal(allowedContexts('no-such-preset').length, ONTOLOGY_LEVELS.length, 'an unknown preset allows every level');
  t.ok(allowedContexts('scientific').every((choice) => choice.description !== ''), 'every choice is described');
  t.match(findAllowedContext(' HYPOTHESIS', 'scientific'), { name: 'hypothesis' });
  t.equal(findAllowedContext('award', 'scientific'), undefined, 'a level the preset does not pick');
});
