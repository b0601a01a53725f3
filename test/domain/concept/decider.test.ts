import t from 'tap';
import { validate as isUuid, version as uuidVersion } from 'uuid';
import { CONCEPT_ID_NAMESPACE, conceptDecider, conceptIdFor, conceptName, conceptNameKey, type ConceptCommand, type ConceptEvent } from '../../../src/domain/concept/decider.js';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { packVector } from '../../../src/interchange/vectors.js';

const given = spec(conceptDecider).given;
const create: Extract<ConceptCommand, { type: 'CreateConcept' }> = {
  type: 'CreateConcept',
  canonicalName: '  Marie Curie ',
  context: ' person ',
  ontologyClass: 'scientist',
  aliases: ['Curie', ' curie ', 'Madame Curie', 'marie curie', '', 'M. Curie'],
  sourceId: 's1',
};
const created: ConceptEvent = {
  type: 'ConceptCreated',
  data: { canonical_name: 'Marie Curie', context: 'person', ontology_class: 'scientist', aliases: ['Curie', 'Madame Curie', 'M. Curie'], source_id: 's1' },
};
const mergedAway: ConceptEvent = { type: 'ConceptMergedInto', data: { survivor_id: 'c2', reason: 'same person' } };

t.test('conceptIdFor is a uuidv5 of the normalised key', async (t) => {
  const id = conceptIdFor('r1', 'Marie Curie', 'person');
  t.ok(isUuid(id));
  t.equal(uuidVersion(id), 5);
  t.equal(conceptIdFor('r1', '  marie CURIE ', ' Person'), id, 'case and surrounding spaces do not matter');
  t.not(conceptIdFor('r2', 'Marie Curie', 'person'), id, 'repositories differ');
  t.not(conceptIdFor('r1', 'Marie Curie', 'organization'), id, 'contexts differ');
  t.not(conceptIdFor('r1', 'Pierre Curie', 'person'), id);
  t.match(CONCEPT_ID_NAMESPACE, /^[0-9a-f-]{36}$/);
});

t.test('a name is composed (NFC) as it enters: one id, one spelling and one key for both spellings', async (t) => {
  const composed = "Pierre Curie's café";
  const decomposed = "Pierre Curie's cafe\u0301";
  t.not(decomposed, composed);
  t.equal(conceptIdFor('r1', decomposed, 'place'), conceptIdFor('r1', composed, 'place'), 'one concept id');
  t.equal(conceptIdFor('r1', 'Marie Curie', 'person'), conceptIdFor('r1', ' marie curie ', 'person'), 'an ASCII name keeps the id it had');
  t.equal(conceptName(` ${decomposed} `), composed);
  // Lower case composed again: `T` + U+0308 has no composed capital, its lower case composes to U+1E97.
  t.equal(conceptNameKey('T\u0308'), conceptNameKey('\u1e97'));
  t.equal(conceptNameKey('Zu\u0308RICH'), 'zürich');
  t.same(given([]).when({ ...create, canonicalName: decomposed, aliases: ['Le Cafe\u0301', 'le café', composed] }).events(), [
    { type: 'ConceptCreated', data: { ...created.data, canonical_name: composed, aliases: ['Le Café'] } },
  ], 'the canonical name and aliases recorded composed, deduplicated by their composed key');
  // A concept recorded before names were composed: its decomposed alias is known in either spelling.
  const legacy: ConceptEvent = { type: 'ConceptCreated', data: { ...created.data, canonical_name: decomposed, aliases: ['Le Cafe\u0301'] } };
  t.same(given([legacy]).when({ type: 'AddAliases', aliases: ['le café', composed, 'Flore'] }).events(), [{ type: 'ConceptAliasAdded', data: { alias: 'Flore' } }]);
  t.same(given([legacy]).when({ type: 'RemoveAlias', alias: 'LE CAFÉ', reason: 'pruned' }).events(), [
    { type: 'ConceptAliasRemoved', data: { alias: 'Le Cafe\u0301', reason: 'pruned' } },
  ], 'removed as recorded');
});

t.test('compatibility forms are folded (NFKC) for identity, accents are not: ＡＩ is AI, ﬁ is fi, café is not cafe', async (t) => {
  t.equal(conceptIdFor('r1', 'ＡＩ', 'field'), conceptIdFor('r1', 'AI', 'field'), 'full-width letters: one concept id');
  t.equal(conceptNameKey('ＡＩ'), 'ai');
  t.equal(conceptNameKey('Eﬃcient Markets'), 'efficient markets', 'a ligature is its letters');
  t.equal(conceptNameKey('H₂O'), conceptNameKey('H2O'), 'a subscript digit is the digit');
  t.equal(conceptNameKey('Marie\u00a0Curie'), 'marie curie', 'a no-break space is a space');
  t.equal(conceptNameKey('ﾃｽﾄ'), conceptNameKey('テスト'), 'half-width katakana is katakana');
  t.not(conceptIdFor('r1', 'café', 'place'), conceptIdFor('r1', 'cafe', 'place'), 'an accent makes another name');
  t.equal(conceptIdFor('r1', 'Marie Curie', 'person'), conceptIdFor('r1', 'marie curie', 'person'), 'an ASCII name keeps its id');
  t.equal(conceptName(' ＡＩ '), 'ＡＩ', 'the name is kept as written: only its key is folded');
  t.same(given([]).when({ ...create, canonicalName: 'AI', context: 'field', aliases: ['ＡＩ', 'Artiﬁcial Intelligence', 'Artificial intelligence'] }).events(), [
    { type: 'ConceptCreated', data: { ...created.data, canonical_name: 'AI', context: 'field', aliases: ['Artiﬁcial Intelligence'] } },
  ], 'aliases deduplicated by the folded key, first spelling kept');
});

t.test('create trims, dedupes aliases case-insensitively and leaves out the canonical name', async (t) => {
  t.same(given([]).when(create).events(), [created]);
  t.same(
    given([]).when({ ...create, ontologyClass: '  ', aliases: [] }).events(),
    [{ type: 'ConceptCreated', data: { ...created.data, ontology_class: null, aliases: [] } }],
    'a blank ontology class is none',
  );
  t.same(
    (given([]).when({ ...create, aliases: ['x'.repeat(201), 'Curie'] }).events()[0].data as { aliases: string[] }).aliases,
    ['Curie'],
    'an over-long alias is dropped, not fatal',
  );
  for (const bad of [{ canonicalName: '   ' }, { context: '' }, { canonicalName: 'x'.repeat(201) }]) {
    t.equal(given([]).when({ ...create, ...bad }).thenThrows(DomainError).code, 'invalid', JSON.stringify(bad).slice(0, 40));
  }
  t.equal(given([created]).when({ ...create, canonicalName: '' }).thenThrows(DomainError).code, 'invalid', 'checked on an existing concept too');
});

t.test('a name is counted in characters: 200 emoji or astral-plane ideographs are a name, 201 are not', async (t) => {
  const emoji = '🧬'.repeat(200);
  const ideographs = '𠀀'.repeat(200);
  t.same(given([]).when({ ...create, canonicalName: emoji, aliases: [ideographs, `${ideographs}𠀀`] }).events(), [
    { type: 'ConceptCreated', data: { ...created.data, canonical_name: emoji, aliases: [ideographs] } },
  ], 'at the limit kept (400 UTF-16 units), one over dropped');
  t.equal(given([]).when({ ...create, canonicalName: `${emoji}x` }).thenThrows(DomainError).code, 'invalid');
  t.same(given([created]).when({ type: 'AddAliases', aliases: [emoji] }).events(), [{ type: 'ConceptAliasAdded', data: { alias: emoji } }]);
});

t.test('creating an existing concept adds only the aliases it lacks', async (t) => {
  t.same(given([created]).when(create).events(), [], 'a twin extraction records nothing');
  t.same(given([created]).when({ ...create, aliases: ['madame curie', 'Maria Skłodowska', 'MARIA SKŁODOWSKA', 'Marie Curie'] }).events(), [
    { type: 'ConceptAliasAdded', data: { alias: 'Maria Skłodowska' } },
  ]);
  t.same(given([created, mergedAway]).when({ ...create, aliases: ['New'] }).events(), [], 'a merged concept: the caller follows the survivor');
});

t.test('aliases are added and removed', async (t) => {
  t.same(given([created]).when({ type: 'AddAliases', aliases: ['Curie', 'Skłodowska', ' '] }).events(), [
    { type: 'ConceptAliasAdded', data: { alias: 'Skłodowska' } },
  ]);
  const added: ConceptEvent = { type: 'ConceptAliasAdded', data: { alias: 'Skłodowska' } };
  t.same(given([created, added]).when({ type: 'AddAliases', aliases: ['skłodowska'] }).events(), []);
  t.same(given([created]).when({ type: 'RemoveAlias', alias: ' madame CURIE', reason: 'too vague' }).events(), [
    { type: 'ConceptAliasRemoved', data: { alias: 'Madame Curie', reason: 'too vague' } },
  ], 'found case-insensitively, recorded as stored');
  const removed: ConceptEvent = { type: 'ConceptAliasRemoved', data: { alias: 'Madame Curie', reason: 'x' } };
  t.same(given([created, removed]).when({ type: 'RemoveAlias', alias: 'Madame Curie', reason: 'x' }).events(), [], 'already removed');
  t.same(given([created]).when({ type: 'RemoveAlias', alias: 'Nobody', reason: 'x' }).events(), [], 'unknown alias');
  t.same(given([created]).when({ type: 'RemoveAlias', alias: 'Marie Curie', reason: 'x' }).events(), [], 'the canonical name is not an alias');
  t.same(given([created, removed]).when({ type: 'AddAliases', aliases: ['Madame Curie'] }).events(), [
    { type: 'ConceptAliasAdded', data: { alias: 'Madame Curie' } },
  ], 'a removed alias can come back');
  t.equal(given([]).when({ type: 'AddAliases', aliases: ['x'] }).thenThrows(DomainError).code, 'not_found');
  t.equal(given([]).when({ type: 'RemoveAlias', alias: 'x', reason: '' }).thenThrows(DomainError).code, 'not_found');
  t.same(given([created, mergedAway]).when({ type: 'AddAliases', aliases: ['x'] }).events(), []);
  t.same(given([created, mergedAway]).when({ type: 'RemoveAlias', alias: 'Curie', reason: '' }).events(), []);
});

t.test('an embedding is recorded once per model', async (t) => {
  const vector = packVector([0.1, 0.2, 0.3]);
  const record = { type: 'RecordEmbedding', model: 'local-100d', dimensions: 3, vector } as const;
  const embedded: ConceptEvent = { type: 'ConceptEmbedded', data: { model: 'local-100d', dimensions: 3, vector } };
  t.same(given([created]).when(record).events(), [embedded]);
  t.same(given([created, embedded]).when(record).events(), [], 'same model again');
  t.equal(given([created, embedded]).when({ ...record, model: 'other' }).events().length, 1, 'another model is recorded');
  t.same(given([created, mergedAway]).when(record).events(), [], 'a merged concept is not embedded');
  t.equal(given([]).when(record).thenThrows(DomainError).code, 'not_found');
  t.equal(given([created]).when({ ...record, dimensions: 4 }).thenThrows(DomainError).code, 'invalid', 'vector length must match');
  t.equal(given([created]).when({ ...record, dimensions: 0, vector: '' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([created]).when({ ...record, model: ' ' }).thenThrows(DomainError).code, 'invalid');
});

t.test('a concept merges once', async (t) => {
  t.same(given([created]).when({ type: 'MergeConcept', survivorId: 'c2', reason: 'same person' }).events(), [mergedAway]);
  t.same(given([created, mergedAway]).when({ type: 'MergeConcept', survivorId: 'c3', reason: 'x' }).events(), [], 'already merged');
  t.equal(given([]).when({ type: 'MergeConcept', survivorId: 'c2', reason: '' }).thenThrows(DomainError).code, 'not_found');
  t.equal(given([created]).when({ type: 'MergeConcept', survivorId: ' ', reason: '' }).thenThrows(DomainError).code, 'invalid');
});

t.test('evolve', async (t) => {
  const fold = (events: ConceptEvent[]) => events.reduce(conceptDecider.evolve, conceptDecider.initialState());
  t.same(fold([]), { status: 'none' });
  t.same(fold([created, created]), fold([created]), 'a second creation changes nothing');
  t.same(fold([
    created,
    { type: 'ConceptAliasAdded', data: { alias: 'Skłodowska' } },
    { type: 'ConceptAliasAdded', data: { alias: 'skłodowska' } },
    { type: 'ConceptAliasRemoved', data: { alias: 'curie', reason: '' } },
    { type: 'ConceptEmbedded', data: { model: 'm', dimensions: 1, vector: packVector([1]) } },
    mergedAway,
  ]), {
    status: 'merged',
    canonicalName: 'Marie Curie',
    context: 'person',
    aliases: ['Madame Curie', 'M. Curie', 'Skłodowska'],
    embeddedWith: 'm',
    survivorId: 'c2',
    slices: [],
    synthesisInputs: null,
    resynthesisRequested: false,
  });
  t.same(fold([{ type: 'ConceptAliasAdded', data: { alias: 'x' } }]), { status: 'none' }, 'events before creation are ignored');
});
