import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import {
  MAX_REPORT_BYTES,
  reportDecider,
  ReportTooLargeError,
  type AnnotatedSentence,
  type ReportEvent,
} from '../../../src/domain/report/decider.js';

const given = spec(reportDecider).given;
const ID = 'report-1';
const created: ReportEvent = {
  type: 'ReportCreated',
  data: { title: 'Curie', text: 'Marie Curie won two Nobel Prizes in two different sciences.', topic: null, parent_id: null, origin: 'text', filename: null },
};
const settings = { similarity_threshold: 0.7, max_facts_per_sentence: 2, min_sentence_runes: 40 };
const sentence: AnnotatedSentence = {
  index: 0,
  text: 'Marie Curie won two Nobel Prizes in two different sciences.',
  start: 0,
  end: 59,
  facts: [{ fact_id: 'f1', score: 0.91, posture: 'supports' }],
  carried: false,
};
const started: ReportEvent = { type: 'ReportAnnotationStarted', data: { revision: 1 } };
const annotated: ReportEvent = { type: 'ReportAnnotated', data: { revision: 1, model_id: 'm', ...settings, sentences: [sentence] } };

t.test('create: trimmed fields, refused when empty, too large or its own parent', async (t) => {
  t.same(given([]).when({ type: 'CreateReport', reportId: ID, title: ' Curie ', text: created.data.text as string, topic: '  ' }).events(), [created]);
  t.same(
    given([]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: 'a\r\nb', parentId: 'p', origin: 'upload', filename: 'a.md' }).events(),
    [{ type: 'ReportCreated', data: { title: 'T', text: 'a\nb', topic: null, parent_id: 'p', origin: 'upload', filename: 'a.md' } }],
    'line ends normalised',
  );
  t.match(given([]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: ' \n\t ' }).thenThrows(DomainError), { code: 'invalid', message: /empty/ });
  t.match(given([]).when({ type: 'CreateReport', reportId: ID, title: ' ', text: 'x' }).thenThrows(DomainError), { code: 'invalid', message: /title/ });
  // A title is one line: a BEL alone was accepted and shown as nothing, a tab or line break inside one too.
  for (const title of ['\u0007', 'Curie\tand Pierre', 'Curie\nPierre', 'Curie\u0085']) {
    t.match(given([]).when({ type: 'CreateReport', reportId: ID, title, text: 'x' }).thenThrows(DomainError), { code: 'invalid', message: /report title holds a control character \(U\+00(07|09|0A|85)\)/ }, JSON.stringify(title));
  }
  const large = given([]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: 'é'.repeat(MAX_REPORT_BYTES / 2 + 1) }).thenThrows(ReportTooLargeError);
  t.match(large.message, /262146 bytes; the limit is 262144/, 'counted in UTF-8 bytes');
  t.same(given([]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: 'x'.repeat(MAX_REPORT_BYTES) }).events().length, 1, 'the limit itself is accepted');
  t.match(given([]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: 'x', parentId: ID }).thenThrows(DomainError), { code: 'invalid', message: /cycle/ });
  t.equal(given([created]).when({ type: 'CreateReport', reportId: ID, title: 'T', text: 'x' }).thenThrows(DomainError).code, 'conflict');
});

t.test('update: only what changed; a text change says so; a parent chain back to the report is a cycle', async (t) => {
  t.same(given([created]).when({ type: 'UpdateReport', reportId: ID, title: 'Curie' }).events(), [], 'nothing changed, nothing recorded');
  t.same(given([created]).when({ type: 'UpdateReport', reportId: ID, title: 'Marie' }).events(), [
    { type: 'ReportUpdated', data: { title: 'Marie', text: created.data.text as string, topic: null, parent_id: null, text_changed: false } },
  ]);
  t.same(given([created]).when({ type: 'UpdateReport', reportId: ID, text: 'New text.', topic: 'physics' }).events(), [
    { type: 'ReportUpdated', data: { title: 'Curie', text: 'New text.', topic: 'physics', parent_id: null, text_changed: true } },
  ]);
  t.same(given([created]).when({ type: 'UpdateReport', reportId: ID, parentId: 'b', parentChain: ['b', 'a'] }).events()[0]?.data, {
    title: 'Curie',
    text: created.data.text,
    topic: null,
    parent_id: 'b',
    text_changed: false,
  });
  t.match(given([created]).when({ type: 'UpdateReport', reportId: ID, parentId: 'b', parentChain: ['b', 'a', ID] }).thenThrows(DomainError), {
    code: 'invalid',
    message: /cycle/,
  });
  t.match(given([created]).when({ type: 'UpdateReport', reportId: ID, text: '' }).thenThrows(DomainError), { code: 'invalid' });
  t.equal(given([]).when({ type: 'UpdateReport', reportId: ID, title: 'x' }).thenThrows(DomainError).code, 'not_found');
  t.equal(given([created, { type: 'ReportDeleted', data: {} }]).when({ type: 'UpdateReport', reportId: ID, title: 'x' }).thenThrows(DomainError).code, 'not_found');
});

t.test('annotation: pending → processing → annotated, per revision', async (t) => {
  t.same(given([created]).when({ type: 'StartAnnotation', revision: 1 }).events(), [started]);
  t.same(given([created, started]).when({ type: 'StartAnnotation', revision: 1 }).events(), [], 'a resumed run adds no event');
  t.same(given([created]).when({ type: 'StartAnnotation', revision: 2 }).events(), [], 'not a revision of this report');
  const record = { type: 'RecordAnnotation' as const, revision: 1, modelId: 'm', sentences: [sentence], ...settings };
  t.same(given([created, started]).when(record).events(), [annotated]);
  t.same(given([created, started, annotated]).when(record).events(), [], 'recorded once');
  const edited: ReportEvent = { type: 'ReportUpdated', data: { title: 'Curie', text: 'Other.', topic: null, parent_id: null, text_changed: true } };
  t.same(given([created, started, edited]).when(record).events(), [], 'a stale annotation (the text changed meanwhile) records nothing');
  t.same(given([created, started, edited]).when({ type: 'StartAnnotation', revision: 2 }).events(), [{ type: 'ReportAnnotationStarted', data: { revision: 2 } }]);
  const titled: ReportEvent = { type: 'ReportUpdated', data: { title: 'T', text: created.data.text as string, topic: null, parent_id: null, text_changed: false } };
  const state = [created, started, annotated, titled].reduce(reportDecider.evolve, reportDecider.initialState());
  t.match(state, { status: 'annotated', revision: 1, title: 'T' }, 'a title change keeps the annotation');
  t.throws(() => given([created, started]).when({ ...record, sentences: [sentence, sentence] }).events(), /annotated twice/);
  const tooMany = { ...sentence, facts: [sentence.facts[0], { ...sentence.facts[0], fact_id: 'f2' }, { ...sentence.facts[0], fact_id: 'f3' }] };
  t.throws(() => given([created, started]).when({ ...record, sentences: [tooMany] }).events(), /more than 2 facts/);
});

t.test('requests and failures open and close revisions', async (t) => {
  const requested: ReportEvent = { type: 'ReportAnnotationRequested', data: { revision: 2 } };
  t.same(given([created, started, annotated]).when({ type: 'RequestAnnotation' }).events(), [requested]);
  const state = [created, started, annotated, requested].reduce(reportDecider.evolve, reportDecider.initialState());
  t.match(state, { status: 'pending', revision: 2, fullRequested: true }, 'a request re-annotates every sentence');
  const failed: ReportEvent = { type: 'ReportAnnotationFailed', data: { revision: 1, reason: 'model down' } };
  t.same(given([created, started]).when({ type: 'FailAnnotation', revision: 1, reason: 'model down' }).events(), [failed]);
  t.same(given([created, started, failed]).when({ type: 'FailAnnotation', revision: 1, reason: 'again' }).events(), [], 'failed once');
  t.same(given([created, started, annotated]).when({ type: 'FailAnnotation', revision: 1, reason: 'late' }).events(), [], 'an annotated revision does not fail');
  t.same(given([created, started, failed]).when({ type: 'StartAnnotation', revision: 1 }).events(), [started], 'a retried job starts again');
  t.equal(given([]).when({ type: 'RequestAnnotation' }).thenThrows(DomainError).code, 'not_found');
});

t.test('delete: refused while children point at it; once', async (t) => {
  t.same(given([created]).when({ type: 'DeleteReport', childCount: 0 }).events(), [{ type: 'ReportDeleted', data: {} }]);
  t.match(given([created]).when({ type: 'DeleteReport', childCount: 2 }).thenThrows(DomainError), { code: 'conflict', message: /2 child report/ });
  t.same(given([created, { type: 'ReportDeleted', data: {} }]).when({ type: 'DeleteReport', childCount: 0 }).events(), []);
  t.equal(given([]).when({ type: 'DeleteReport', childCount: 0 }).thenThrows(DomainError).code, 'not_found');
  t.same(given([created, { type: 'ReportDeleted', data: {} }]).when({ type: 'StartAnnotation', revision: 1 }).events(), [], 'a deleted report is not annotated');
});
