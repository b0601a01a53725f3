import t from 'tap';
import { conceptDecider, conceptUnreadData, MAX_DERIVED_CONTENT_CHARS, type ConceptCommand, type ConceptEvent, type SliceWrite } from '../../../src/domain/concept/decider.js';
import { citationProblem, citedFactIds, planSlices, summarySliceId, synthesisId } from '../../../src/domain/concept/summaries.js';
import { DomainError, foldEvents } from '../../../src/domain/decider.js';
import { withoutOmittedData, type RecordedEvent } from '../../../src/eventstore/envelope.js';
import { spec } from '../../../src/domain/testing.js';
import { packVector } from '../../../src/interchange/vectors.js';

const given = spec(conceptDecider).given;
const created: ConceptEvent = {
  type: 'ConceptCreated',
  data: { canonical_name: 'Marie Curie', context: 'person', ontology_class: null, aliases: [], source_id: 's1' },
};
const ids = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `f${from + i}`);
const cite = (factIds: readonly string[]) => factIds.map((id) => `[fact ${id}](<fact:${id}>)`).join(' ');
const slice = (sliceNumber: number, factIds: string[], isOpen: boolean, reason: SliceWrite['reason'] = 'facts_added'): SliceWrite => ({
  sliceId: summarySliceId('c1', sliceNumber),
  sliceNumber,
  factIds,
  isOpen,
  content: cite(factIds),
  reason,
});
const write = (slices: SliceWrite[], removed: Array<{ sliceId: string; sliceNumber: number }> = []): ConceptCommand => ({
  type: 'WriteSummarySlices',
  batchSize: 3,
  modelId: 'm',
  slices,
  removed,
  removeReason: 'facts_removed',
});
/** The envelope around a domain event as a store returns it (only its type and data matter here). */
const recordedShape: RecordedEvent = {
  eventId: 'e',
  streamId: 'concept-c1',
  streamVersion: 0,
  globalPosition: 1,
  type: '',
  schemaVersion: 1,
  data: {},
  occurredAt: '2026-01-01T00:00:00Z',
  repositoryId: 'r',
  actor: 'test',
  causationId: null,
  correlationId: 'c',
};
const written = (s: SliceWrite): ConceptEvent => ({
  type: 'SummarySliceWritten',
  data: { slice_id: s.sliceId, slice_number: s.sliceNumber, is_open: s.isOpen, fact_ids: s.factIds, content: s.content, model_id: 'm', reason: s.reason },
});

t.test('citations: the link form and bare forms are all found; only allowed facts pass', async (t) => {
  t.same(citedFactIds('A [x](<fact:a>) and [y](<fact:b>), again [z](<fact:a>); bare (fact:c) and <fact:d>.'), ['a', 'b', 'c', 'd']);
  t.equal(citationProblem('[x](<fact:a>)', new Set(['a'])), null);
  t.match(citationProblem('[x](<fact:a>) [y](<fact:zz>)', new Set(['a'])), /outside its input: zz/);
  t.match(citationProblem('no citation at all', new Set(['a'])), /cites no fact/);
  t.match(citationProblem('  ', new Set(['a'])), /empty/);
  t.not(summarySliceId('c1', 1), summarySliceId('c1', 2));
  t.not(summarySliceId('c1', 1), synthesisId('c1'));
});

t.test('planSlices: fills the open slice, freezes full ones at exactly batch_size, in the stable order', async (t) => {
  t.same(planSlices([], ids(1, 2), 3), { writes: [{ sliceNumber: 1, factIds: ['f1', 'f2'], isOpen: true, reason: 'facts_added' }], removeFrom: null });
  const grown = planSlices([{ sliceNumber: 1, factIds: ['f1', 'f2'], isOpen: true }], ids(1, 7), 3);
  t.same(grown.writes, [
    { sliceNumber: 1, factIds: ['f1', 'f2', 'f3'], isOpen: false, reason: 'facts_added' },
    { sliceNumber: 2, factIds: ['f4', 'f5', 'f6'], isOpen: false, reason: 'facts_added' },
    { sliceNumber: 3, factIds: ['f7'], isOpen: true, reason: 'facts_added' },
  ]);
  // A fact older than a frozen slice's (linked late) goes to the open slice: frozen ones never change for new facts.
  const frozen = [{ sliceNumber: 1, factIds: ['f2', 'f3', 'f4'], isOpen: false }];
  t.same(planSlices(frozen, ['f1', 'f2', 'f3', 'f4'], 3).writes, [{ sliceNumber: 2, factIds: ['f1'], isOpen: true, reason: 'facts_added' }]);
  t.same(planSlices(frozen, ['f2', 'f3', 'f4'], 3), { writes: [], removeFrom: null }, 'nothing changed, nothing written');
});

t.test('planSlices: a fact that left a frozen slice rewrites it and the slices after it; surplus slices are removed', async (t) => {
  const slices = [
    { sliceNumber: 1, factIds: ['f1', 'f2', 'f3'], isOpen: false },
    { sliceNumber: 2, factIds: ['f4', 'f5', 'f6'], isOpen: false },
    { sliceNumber: 3, factIds: ['f7'], isOpen: true },
  ];
  t.same(planSlices(slices, ['f1', 'f3', 'f4', 'f5', 'f6', 'f7'], 3), {
    writes: [
      { sliceNumber: 1, factIds: ['f1', 'f3', 'f4'], isOpen: false, reason: 'facts_removed' },
      { sliceNumber: 2, factIds: ['f5', 'f6', 'f7'], isOpen: false, reason: 'facts_removed' },
    ],
    removeFrom: 3,
  });
  t.same(planSlices(slices, ['f1', 'f2', 'f3'], 3), { writes: [], removeFrom: 2 }, 'slice 1 keeps its facts; 2 and 3 go');
  t.same(planSlices(slices, [], 3), { writes: [], removeFrom: 1 }, 'a concept without facts keeps no slice');
  t.throws(() => planSlices([], ['f1'], 0));
});

t.test('WriteSummarySlices: records the slices, and the same slices again record nothing', async (t) => {
  const one = slice(1, ['f1', 'f2', 'f3'], false);
  const two = slice(2, ['f4'], true);
  t.same(given([created]).when(write([one, two])).events(), [written(one), written(two)]);
  t.same(given([created, written(one), written(two)]).when(write([one, two])).events(), [], 'a twin wrote them already');
  const grown = slice(2, ['f4', 'f5'], true);
  t.same(given([created, written(one), written(two)]).when(write([grown])).events(), [written(grown)], 'the open slice grows');
});

t.test('WriteSummarySlices: refuses a frozen slice rewritten without facts leaving, bad sizes, bad citations, gaps and two open slices', async (t) => {
  const one = slice(1, ['f1', 'f2', 'f3'], false);
  const history = [created, written(one)];
  given(history).when(write([slice(1, ['f1', 'f2', 'f9'], false)])).thenThrows(DomainError, (error) => error.code === 'conflict');
  t.same(
    given(history).when(write([slice(1, ['f1', 'f3', 'f4'], false, 'facts_removed')])).events(),
    [written(slice(1, ['f1', 'f3', 'f4'], false, 'facts_removed'))],
    'facts leaving rewrites a frozen slice',
  );
  given([created]).when(write([slice(1, ['f1', 'f2'], false)])).thenThrows(DomainError, (error) => /exactly 3/.test(error.message));
  given([created]).when(write([slice(1, ['f1', 'f2', 'f3'], true)])).thenThrows(DomainError, (error) => /fewer than 3/.test(error.message));
  given([created]).when(write([slice(1, [], true)])).thenThrows(DomainError, (error) => /no fact/.test(error.message));
  given([created]).when(write([slice(1, ['f1', 'f1'], true)])).thenThrows(DomainError, (error) => /twice/.test(error.message));
  given([created]).when(write([slice(2, ['f1'], true)])).thenThrows(DomainError, (error) => /numbered 1..n/.test(error.message));
  given([created]).when(write([slice(1, ['f1'], true), slice(2, ['f2'], true)])).thenThrows(DomainError, (error) => /only the last/.test(error.message));
  given(history).when(write([slice(2, ['f3'], true)])).thenThrows(DomainError, (error) => /two summary slices/.test(error.message));
  const foreign = { ...slice(1, ['f1'], true), content: '[x](<fact:f1>) [y](<fact:f2>)' };
  given([created]).when(write([foreign])).thenThrows(DomainError, (error) => /refused: .*outside its input: f2/.test(error.message));
  given([]).when(write([slice(1, ['f1'], true)])).thenThrows(DomainError, (error) => error.code === 'not_found');
  t.same(given([created, { type: 'ConceptMergedInto', data: { survivor_id: 'c2', reason: 'x' } }]).when(write([slice(1, ['f1'], true)])).events(), [], 'a merged concept records nothing');
});

t.test('WriteSummarySlices: removes slices from the end', async (t) => {
  const one = slice(1, ['f1', 'f2', 'f3'], false);
  const two = slice(2, ['f4'], true);
  t.same(given([created, written(one), written(two)]).when(write([], [{ sliceId: two.sliceId, sliceNumber: 2 }])).events(), [
    { type: 'SummarySliceRemoved', data: { slice_id: two.sliceId, slice_number: 2, reason: 'facts_removed' } },
  ]);
  given([created, written(one), written(two)])
    .when(write([], [{ sliceId: one.sliceId, sliceNumber: 1 }]))
    .thenThrows(DomainError, (error) => /slice 1 is missing/.test(error.message));
});

type RecordSynthesis = Extract<ConceptCommand, { type: 'RecordSynthesis' }>;

/** A synthesis of c1 citing f1, the one the tests below record; `change` sets what a test is about. */
const recordSynthesis = (change: Partial<RecordSynthesis> = {}): RecordSynthesis => ({
  type: 'RecordSynthesis',
  synthesisId: synthesisId('c1'),
  content: '[a](<fact:f1>)',
  factIds: ['f1'],
  sliceIds: [],
  relatedConceptIds: [],
  relatedSynthesisIds: [],
  imageFactIds: [],
  modelId: 'm',
  inputsHash: 'h1',
  allowedFactIds: ['f1'],
  ...change,
});

t.test('RecordSynthesis: once per inputs, again when asked; citations checked', async (t) => {
  const record = recordSynthesis({ sliceIds: ['s1'], allowedFactIds: ['f1', 'f2'] });
  const [synthesized] = given([created]).when(record).events();
  t.match(synthesized, { type: 'ConceptSynthesized', data: { inputs_hash: 'h1', reason: 'inputs_changed', fact_ids: ['f1'] } });
  t.same(given([created, synthesized]).when(record).events(), [], 'the same inputs again: nothing');
  t.match(given([created, synthesized]).when({ ...record, inputsHash: 'h2' }).events(), [{ type: 'ConceptSynthesized', data: { inputs_hash: 'h2' } }]);
  const [requested] = given([created, synthesized]).when({ type: 'RequestResynthesis', reason: ' stale ' }).events();
  t.same(requested, { type: 'ConceptResynthesisRequested', data: { reason: 'stale' } });
  const [long] = given([created]).when({ type: 'RequestResynthesis', reason: `a${'😀'.repeat(600)}` }).events();
  t.same(long, { type: 'ConceptResynthesisRequested', data: { reason: `a${'😀'.repeat(499)}` } }, 'kept to 500 characters, never half of one');
  t.match(given([created, synthesized, requested]).when(record).events(), [{ type: 'ConceptSynthesized', data: { reason: 'requested' } }], 'asked: made again');
  given([created]).when({ ...record, content: '[a](<fact:f9>)' }).thenThrows(DomainError, (error) => /refused/.test(error.message));
  given([created, { type: 'ConceptMergedInto', data: { survivor_id: 'c2', reason: 'x' } }])
    .when({ type: 'RequestResynthesis', reason: '' })
    .thenThrows(DomainError, (error) => error.code === 'conflict');
});

t.test('RemoveSynthesis: only a concept that has one loses it, once', async (t) => {
  const remove = { type: 'RemoveSynthesis', synthesisId: synthesisId('c1'), reason: 'no facts left' } as const;
  const [synthesized] = given([created]).when(recordSynthesis()).events();
  const removed = { type: 'ConceptSynthesisRemoved', data: { synthesis_id: synthesisId('c1'), reason: 'no facts left' } } as const;
  t.same(given([created, synthesized]).when(remove).events(), [removed]);
  t.same(given([created, synthesized, removed]).when(remove).events(), [], 'removed already');
  t.same(given([created]).when(remove).events(), [], 'never synthesised');
});

t.test('conceptUnreadData: a stream read without those fields folds to the same state and decides alike', async (t) => {
  const one = slice(1, ['f1', 'f2', 'f3'], false);
  const two = slice(2, ['f4'], true);
  const stream: ConceptEvent[] = [
    created,
    { type: 'ConceptEmbedded', data: { model: 'local', dimensions: 2, vector: packVector([0.6, 0.8]) } },
    written(one),
    written(two),
    given([created]).when(recordSynthesis({ sliceIds: [one.sliceId] })).events()[0],
  ];
  const stripped = stream.map((event) => withoutOmittedData({ ...recordedShape, type: event.type, data: { ...event.data } }, conceptUnreadData)) as unknown as ConceptEvent[]; // recorded envelopes carry the domain event's type and data
  t.notOk(stripped.some((event) => 'content' in event.data || 'vector' in event.data), 'the Markdown and the vector are gone');
  t.same(foldEvents(conceptDecider, stripped), foldEvents(conceptDecider, stream), 'the same state');
  const grow = write([slice(2, ['f4', 'f5'], true)]);
  t.same(spec(conceptDecider).given(stripped).when(grow).events(), given(stream).when(grow).events(), 'the same decision');
});

t.test('RecordSynthesis: its size bound counts characters, so an emoji is one, not two UTF-16 units', async (t) => {
  const cited = '[a](<fact:f1>)';
  const record = (content: string) => recordSynthesis({ content, sliceIds: ['s1'] });
  const fill = MAX_DERIVED_CONTENT_CHARS - cited.length;
  const emoji = `${cited}${'😀'.repeat(fill)}`;
  t.ok(emoji.length > MAX_DERIVED_CONTENT_CHARS, 'more UTF-16 units than the bound');
  t.match(given([created]).when(record(emoji)).events(), [{ type: 'ConceptSynthesized' }], 'as many characters as the bound: recorded');
  given([created])
    .when(record(`${emoji}😀`))
    .thenThrows(DomainError, (error) => /longer than 200000 characters/.test(error.message));
});
