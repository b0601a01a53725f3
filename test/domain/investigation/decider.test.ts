import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import {
  investigationDecider,
  MAX_INVESTIGATION_SOURCES,
  MAX_INVESTIGATION_TITLE_CHARS,
  MAX_INVESTIGATION_TOPIC_CHARS,
  type InvestigationEvent,
} from '../../../src/domain/investigation/decider.js';

const given = spec(investigationDecider).given;
const created: InvestigationEvent = { type: 'InvestigationCreated', data: { title: 'Radioactivity', topic: 'Who discovered polonium?' } };
const added: InvestigationEvent = { type: 'InvestigationSourceAdded', data: { source_id: 'source-a' } };
const deleted: InvestigationEvent = { type: 'InvestigationDeleted', data: { reason: null } };

t.test('create: trimmed title and topic; bad input refused', async (t) => {
  t.same(given([]).when({ type: 'CreateInvestigation', title: ' Radioactivity ', topic: ' Who discovered polonium? ' }).events(), [created]);
  t.same(given([]).when({ type: 'CreateInvestigation', title: 'Radioactivity', topic: '' }).events(), [
    { type: 'InvestigationCreated', data: { title: 'Radioactivity', topic: '' } },
  ], 'a topic may be empty');
  t.equal(given([]).when({ type: 'CreateInvestigation', title: '  ', topic: '' }).thenThrows(DomainError).code, 'invalid', 'blank title');
  t.match(given([]).when({ type: 'CreateInvestigation', title: '\u0007', topic: '' }).thenThrows(DomainError), { code: 'invalid', message: /investigation title holds a control character \(U\+0007\)/ }, 'a title of a control character');
  t.equal(given([]).when({ type: 'CreateInvestigation', title: 'x'.repeat(MAX_INVESTIGATION_TITLE_CHARS + 1), topic: '' }).thenThrows(DomainError).code, 'invalid', 'long title');
  t.equal(given([]).when({ type: 'CreateInvestigation', title: 'x', topic: 'y'.repeat(MAX_INVESTIGATION_TOPIC_CHARS + 1) }).thenThrows(DomainError).code, 'invalid', 'long topic');
  t.equal(given([created]).when({ type: 'CreateInvestigation', title: 'Again', topic: '' }).thenThrows(DomainError).code, 'conflict');
  // Characters, as the route's maxLength counts them: an emoji is one, though two UTF-16 units.
  const emojiTitle = '😀'.repeat(MAX_INVESTIGATION_TITLE_CHARS);
  t.same(given([]).when({ type: 'CreateInvestigation', title: emojiTitle, topic: '😀'.repeat(MAX_INVESTIGATION_TOPIC_CHARS) }).events()[0]?.data, {
    title: emojiTitle,
    topic: '😀'.repeat(MAX_INVESTIGATION_TOPIC_CHARS),
  });
});

t.test('update records only what changed', async (t) => {
  t.same(given([created]).when({ type: 'UpdateInvestigation', title: 'Radioactivity' }).events(), [], 'same title, no event');
  t.same(given([created]).when({ type: 'UpdateInvestigation', title: 'Polonium', topic: 'Who discovered polonium?' }).events(), [
    { type: 'InvestigationUpdated', data: { title: 'Polonium', topic: null } },
  ]);
  t.equal(given([]).when({ type: 'UpdateInvestigation', title: 'x' }).thenThrows(DomainError).code, 'not_found');
  t.equal(given([created, deleted]).when({ type: 'UpdateInvestigation', title: 'x' }).thenThrows(DomainError).code, 'gone');
  t.equal(given([created]).when({ type: 'UpdateInvestigation', title: '' }).thenThrows(DomainError).code, 'invalid');
});

t.test('sources: added once, removed only when present', async (t) => {
  t.same(given([created]).when({ type: 'AddInvestigationSource', sourceId: 'source-a', liveSources: 0 }).events(), [added]);
  t.same(given([created, added]).when({ type: 'AddInvestigationSource', sourceId: 'source-a', liveSources: 0 }).events(), [], 'adding twice is a no-op');
  t.same(given([created, added]).when({ type: 'RemoveInvestigationSource', sourceId: 'source-a' }).events(), [
    { type: 'InvestigationSourceRemoved', data: { source_id: 'source-a' } },
  ]);
  const removed: InvestigationEvent = { type: 'InvestigationSourceRemoved', data: { source_id: 'source-a' } };
  t.equal(given([created, added, removed]).when({ type: 'RemoveInvestigationSource', sourceId: 'source-a' }).thenThrows(DomainError).code, 'not_found');
  t.same(given([created, added, removed]).when({ type: 'AddInvestigationSource', sourceId: 'source-a', liveSources: 0 }).events(), [added], 'added again after removal');
  t.equal(given([created, deleted]).when({ type: 'AddInvestigationSource', sourceId: 'source-b', liveSources: 0 }).thenThrows(DomainError).code, 'gone');
});

t.test('sources: at most MAX_INVESTIGATION_SOURCES live ones; deleted sources do not count', async (t) => {
  const full: InvestigationEvent[] = [created];
  for (let i = 0; i < MAX_INVESTIGATION_SOURCES; i++) full.push({ type: 'InvestigationSourceAdded', data: { source_id: `source-${i}` } });
  const refused = given(full).when({ type: 'AddInvestigationSource', sourceId: 'one-more', liveSources: MAX_INVESTIGATION_SOURCES }).thenThrows(DomainError);
  t.equal(refused.code, 'invalid');
  t.match(refused.message, /at most 1000 sources/);
  t.same(
    given(full).when({ type: 'AddInvestigationSource', sourceId: 'one-more', liveSources: MAX_INVESTIGATION_SOURCES - 1 }).events(),
    [{ type: 'InvestigationSourceAdded', data: { source_id: 'one-more' } }],
    'one of the thousand was deleted since',
  );
  t.same(given(full).when({ type: 'AddInvestigationSource', sourceId: 'source-7', liveSources: MAX_INVESTIGATION_SOURCES }).events(), [], 'one it has: a no-op, not refused');
});

t.test('delete is final and idempotent', async (t) => {
  t.same(given([created]).when({ type: 'DeleteInvestigation' }).events(), [deleted]);
  t.same(given([created, deleted]).when({ type: 'DeleteInvestigation' }).events(), []);
  t.equal(given([]).when({ type: 'DeleteInvestigation' }).thenThrows(DomainError).code, 'not_found');
});
