import t from 'tap';
import { createLocalChatModel, LOCAL_FACT_EXTRACTOR_MODEL_ID } from '../../../src/providers/llm/local.js';
import { nameKey } from '../../../src/providers/llm/localConcepts.js';
import type { ConceptCandidate, ConceptContextChoice, RefinementInput } from '../../../src/providers/llm/port.js';
import { findPreset } from '../../../src/domain/repository/presets.js';

const model = createLocalChatModel();

const scientific = findPreset('scientific');
const scientificContexts: ConceptContextChoice[] = [...(scientific?.contexts ?? []), ...(scientific?.custom_contexts ?? [])].map(
  (name) => ({ name, description: `${name} concepts` }),
);
const enterpriseContexts: ConceptContextChoice[] = (findPreset('enterprise')?.contexts ?? []).map((name) => ({ name, description: '' }));

const FACTS = [
  'Marie Curie won the Nobel Prize in Physics in 1903.',
  'Radium was discovered by Marie and Pierre Curie.',
  'Polonium is a radioactive chemical element.',
  'The Curies discovered polonium in 1898.',
  'X-ray crystallography reveals the structure of crystals.',
  'The Massachusetts Institute of Technology (MIT) is in Cambridge.',
  'MIT was founded in 1861.',
  'Marie Curie worked at the University of Paris.',
  'Dr. Alexander Fleming discovered penicillin at St Mary\'s Hospital in London.',
  'Fleming received the Copley Medal of the Royal Society.',
  'Rosalind Franklin used X-ray crystallography to study DNA.',
  'Deoxyribonucleic acid (DNA) carries genetic information.',
  'Tuberculosis is an infectious disease caused by bacteria.',
  'It was the best time of the year.',
  'Radioactivity was studied by Marie Curie.',
].map((content, i) => ({ id: `fact-${String(i).padStart(2, '0')}`, content }));

function byName(concepts: ConceptCandidate[], name: string): ConceptCandidate | undefined {
  return concepts.find((concept) => concept.canonicalName === name);
}

t.test('the chat model identifies itself and sees no pixels', async (t) => {
  t.equal(model.modelId, 'local/rule-based-v1');
  t.equal(model.modelId, LOCAL_FACT_EXTRACTOR_MODEL_ID);
  t.equal(model.canSeeImages, false);
});

t.test('named entities and salient noun phrases, in allowed contexts, linked to their facts', async (t) => {
  const concepts = await model.extractConcepts({ facts: FACTS, contexts: scientificContexts });
  const allowed = new Set(scientificContexts.map((context) => context.name));
  for (const concept of concepts) {
    t.ok(allowed.has(concept.context), `${concept.canonicalName}: context ${concept.context} is allowed`);
    t.ok(concept.factIds.length > 0, `${concept.canonicalName} has facts`);
    t.ok(concept.factIds.every((id) => FACTS.some((fact) => fact.id === id)), 'fact ids come from the input');
  }

  const marie = byName(concepts, 'Marie Curie');
  t.match(marie, { context: 'person', ontologyClass: 'person', aliases: ['Curie'] });
  t.same(marie?.factIds, ['fact-00', 'fact-01', 'fact-07', 'fact-14'], '"Marie and Pierre Curie" names Marie Curie too');
  t.match(byName(concepts, 'Pierre Curie'), { context: 'person', aliases: ['Curie'], factIds: ['fact-01'] });
  t.match(byName(concepts, 'Alexander Fleming'), { context: 'person', aliases: ['Fleming'], factIds: ['fact-08', 'fact-09'] },
    'a title is dropped, and the bare surname resolves to the one person who has it');
  t.match(byName(concepts, 'Rosalind Franklin'), { context: 'person', aliases: ['Franklin'] });

  const mit = byName(concepts, 'Massachusetts Institute of Technology');
  t.match(mit, { context: 'organization', ontologyClass: 'organization' });
  t.ok(mit?.aliases.includes('MIT'), 'acronym from "Expansion (ACR)"');
  t.same(mit?.factIds, ['fact-05', 'fact-06'], 'the bare acronym resolves to its expansion');
  t.match(byName(concepts, 'University of Paris'), { context: 'organization', aliases: ['the University of Paris'] });
  t.match(byName(concepts, 'Royal Society'), { context: 'organization', factIds: ['fact-09'] });
  t.match(byName(concepts, "St Mary's Hospital"), { context: 'organization' });

  t.match(byName(concepts, 'polonium'), { context: 'chemical', ontologyClass: 'chemical', factIds: ['fact-02', 'fact-03'] },
    '"Polonium" opening a sentence is the element written "polonium" elsewhere');
  t.match(byName(concepts, 'radium'), { context: 'chemical' });
  const dna = byName(concepts, 'deoxyribonucleic acid');
  t.match(dna, { context: 'chemical', aliases: ['DNA'], factIds: ['fact-10', 'fact-11'] });
  t.match(byName(concepts, 'X-ray crystallography'), { context: 'method', factIds: ['fact-04', 'fact-10'] });
  t.match(byName(concepts, 'tuberculosis'), { context: 'disease' });
  t.ok(byName(concepts, 'radioactivity'), 'a technical common noun is a concept');

  const award = byName(concepts, 'Nobel Prize in Physics');
  t.match(award, { ontologyClass: 'award' });
  t.ok(allowed.has(award?.context ?? ''), 'an award without an award context falls back to an allowed one');
  t.match(byName(concepts, 'Copley Medal'), { ontologyClass: 'award' }, 'an award "of" an organization is two concepts');
  t.match(byName(concepts, 'Warsaw') ?? byName(concepts, 'London'), { ontologyClass: 'location' });
});

t.test('skips junk: pronouns, numbers, generic nouns, families and ambiguous surnames', async (t) => {
  const concepts = await model.extractConcepts({ facts: FACTS, contexts: scientificContexts });
  const names = concepts.map((concept) => concept.canonicalName.toLowerCase());
  for (const junk of ['it', 'time', 'year', '1903', '1898', 'curies', 'curie', 'the curies', 'marie', 'structure', 'best time']) {
    t.notOk(names.includes(junk), `no concept "${junk}"`);
  }
  t.notOk(concepts.some((concept) => concept.factIds.includes('fact-13')), 'a fact with nothing specific names no concept');
  t.notOk(concepts.some((concept) => concept.canonicalName.length < 2), 'no single letters');

  const lone = await model.extractConcepts({ facts: [{ id: 'a', content: 'Curie was born in Warsaw.' }], contexts: scientificContexts });
  t.ok(lone.some((concept) => concept.canonicalName === 'Warsaw'), 'a place after "in"');
});

t.test('contexts: only the allowed ones, with fallbacks', async (t) => {
  const concepts = await model.extractConcepts({ facts: FACTS, contexts: enterpriseContexts });
  const allowed = new Set(enterpriseContexts.map((context) => context.name));
  t.ok(concepts.length > 5);
  t.ok(concepts.every((concept) => allowed.has(concept.context)), 'every context is an enterprise context');
  t.equal(byName(concepts, 'Marie Curie')?.context, 'person');
  t.equal(byName(concepts, 'X-ray crystallography')?.context, 'process', 'a method lands in "process"');

  const custom = await model.extractConcepts({
    facts: [{ id: 'f', content: 'Marie Curie studied radioactivity at the University of Paris.' }],
    contexts: [{ name: 'Topic', description: 'anything' }, { name: 'People', description: 'persons' }],
  });
  t.same(custom.map((concept) => [concept.canonicalName, concept.context]), [
    ['Marie Curie', 'People'],
    ['radioactivity', 'Topic'],
    ['University of Paris', 'Topic'],
  ], 'custom names match case-insensitively, the rest falls back to the generic context');
});

t.test('deterministic and independent of the order of the facts', async (t) => {
  const first = await model.extractConcepts({ facts: FACTS, contexts: scientificContexts });
  const again = await createLocalChatModel().extractConcepts({ facts: [...FACTS].reverse(), contexts: scientificContexts });
  t.same(again, first);
  const sorted = [...first].sort((a, b) => (a.context + a.canonicalName.toLowerCase() < b.context + b.canonicalName.toLowerCase() ? -1 : 1));
  t.same(first.map((c) => c.canonicalName), sorted.map((c) => c.canonicalName), 'sorted by context and name');
  const keys = first.map((concept) => `${concept.context}:${concept.canonicalName.toLowerCase()}`);
  t.equal(new Set(keys).size, keys.length, 'one candidate per (name, context)');
});

t.test('rejects bad input and honours an aborted signal', async (t) => {
  await t.rejects(model.extractConcepts({ facts: FACTS, contexts: [] }), TypeError);
  await t.rejects(model.extractConcepts({ facts: 'x' as unknown as [], contexts: scientificContexts }), TypeError);
  await t.rejects(model.extractConcepts({ facts: [{ id: 1 as unknown as string, content: 'x' }], contexts: scientificContexts }), TypeError);
  t.same(await model.extractConcepts({ facts: [], contexts: scientificContexts }), []);
  const controller = new AbortController();
  controller.abort(new Error('stopped'));
  await t.rejects(model.extractConcepts({ facts: FACTS, contexts: scientificContexts }, controller.signal), { message: 'stopped' });
  await t.rejects(model.refineConcepts({ concepts: [], pruneThreshold: 3 }, controller.signal), { message: 'stopped' });
  await t.rejects(model.refineConcepts({ concepts: 'x' as unknown as [], pruneThreshold: 3 }), TypeError);
});

t.test('name keys ignore case, punctuation, article and plural', async (t) => {
  t.equal(nameKey('The X-Rays.'), 'x ray');
  t.equal(nameKey('x-ray'), 'x ray');
  t.equal(nameKey("Curie's"), 'curie');
  t.equal(nameKey('Physics'), 'physics', 'a singular in -ics stays');
  t.not(nameKey('Marie Curie'), nameKey('Pierre Curie'));
});

type Concept = RefinementInput['concepts'][number];
const concept = (id: string, canonicalName: string, aliases: string[] = [], factCount = 1, context = 'person'): Concept => ({
  id, canonicalName, context, aliases, factCount,
});

t.test('refinement merges names that differ only in form, or that are another concept\'s alias', async (t) => {
  const decisions = await model.refineConcepts({
    pruneThreshold: 10,
    concepts: [
      concept('c1', 'Marie Curie', ['Curie', 'Madame Curie'], 5),
      concept('c2', 'Madame Curie', [], 2),
      concept('c3', 'x-ray', [], 1, 'method'),
      concept('c4', 'X-Rays', [], 1, 'method'),
      concept('c5', 'The X-ray', [], 1, 'method'),
      concept('c6', 'Pierre Curie', ['Curie'], 3),
      concept('c7', 'Curie', [], 4),
      concept('c8', 'Marie Curie', [], 9, 'chemical'),
    ],
  });
  const merges = decisions.filter((decision) => decision.type === 'merge');
  t.match(merges, [
    { type: 'merge', loserId: 'c2', survivorId: 'c1', reason: /alias/ },
    { type: 'merge', loserId: 'c3', survivorId: 'c5' },
    { type: 'merge', loserId: 'c4', survivorId: 'c5' },
  ]);
  t.equal(merges.length, 3, '"Curie" is the alias of two persons: no merge; another context: no merge');
  t.match(merges[1], { reason: /case, punctuation, article or number/ });
});

t.test('refinement survivor: more facts, then the longer name, then the smaller id', async (t) => {
  const tie = await model.refineConcepts({
    pruneThreshold: 10,
    concepts: [concept('b', 'Royal Society', [], 2, 'organization'), concept('a', 'the royal society', [], 2, 'organization')],
  });
  t.match(tie, [{ type: 'merge', loserId: 'b', survivorId: 'a' }], 'longer name wins a tie on facts');
  const sameLength = await model.refineConcepts({
    pruneThreshold: 10,
    concepts: [concept('b', 'Radium', [], 1, 'chemical'), concept('a', 'radium', [], 1, 'chemical')],
  });
  t.match(sameLength, [{ type: 'merge', loserId: 'b', survivorId: 'a' }], 'smaller id wins a full tie');
  const moreFacts = await model.refineConcepts({
    pruneThreshold: 10,
    concepts: [concept('a', 'the royal society', [], 1, 'organization'), concept('b', 'Royal Society', [], 7, 'organization')],
  });
  t.match(moreFacts, [{ type: 'merge', loserId: 'a', survivorId: 'b' }]);
});

t.test('refinement prunes short and shared aliases only at the threshold', async (t) => {
  const concepts = [
    concept('p1', 'Marie Curie', ['Curie', 'MC', 'Marie Skłodowska', 'Madame Curie'], 5),
    concept('p2', 'Pierre Curie', ['Curie'], 3),
  ];
  const pruned = await model.refineConcepts({ pruneThreshold: 4, concepts });
  t.same(
    pruned.map((decision) => (decision.type === 'remove_alias' ? [decision.conceptId, decision.alias] : decision.type)),
    [['p1', 'Curie'], ['p1', 'MC']],
  );
  t.match(pruned, [{ reason: /Pierre Curie/ }, { reason: /3 characters/ }]);
  t.same(await model.refineConcepts({ pruneThreshold: 5, concepts }), [], 'below the threshold nothing is pruned');
  const again = await model.refineConcepts({ pruneThreshold: 4, concepts: [...concepts].reverse() });
  t.same(again, pruned, 'decisions do not depend on input order');
});
