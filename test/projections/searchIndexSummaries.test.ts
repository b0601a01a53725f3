import t from 'tap';
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import type { IndexedDocument, SearchCollection } from '../../src/search/collection.js';
import type { SearchIndex } from '../../src/search/port.js';

t.test('a summary slice is indexed without its citations\' <fact:ID> targets, as PostgreSQL reads the Markdown', async (t) => {
  const indexed: IndexedDocument[] = [];
  const unused = async () => {
    throw new Error('not used here');
  };
  // Records what the projection writes; OpenSearch analyzed these targets as words ("fact", id pieces).
  const recording: SearchIndex = {
    search: unused,
    knn: unused,
    knnMany: unused,
    update: unused,
    remove: unused,
    removeRepository: unused,
    async index<Doc extends IndexedDocument>(_collection: SearchCollection<Doc>, docs: readonly Doc[]) {
      indexed.push(...docs);
    },
  };
  const projection = createSearchIndexProjection(recording);
  const factId = randomUUID();
  const content = `Yeast makes bread rise [in warm dough](<fact:${factId}>), the facts say (fact:${factId}).`;
  const event: RecordedEvent = {
    eventId: randomUUID(),
    streamId: `concept-${randomUUID()}`,
    streamVersion: 3,
    globalPosition: 1,
    type: 'SummarySliceWritten',
    schemaVersion: 1,
    data: { slice_id: randomUUID(), slice_number: 1, is_open: true, fact_ids: [factId], content, model_id: 'local', reason: 'facts_added' },
    occurredAt: '2026-01-01T00:00:00.000Z',
    repositoryId: `repo-${randomUUID()}`,
    actor: 'system:test',
    causationId: null,
    correlationId: null,
  };
  // The projection writes outside any transaction here: the recording index has no withinTransaction.
  await projection.apply(undefined as unknown as Knex.Transaction, event);
  t.equal(indexed.length, 1);
  const searched = String((indexed[0] as IndexedDocument & { content: string }).content);
  t.notMatch(searched, /fact:|[0-9a-f]{8}-/, 'no citation target to match');
  t.match(searched, /Yeast makes bread rise \[in warm dough\]\( +\), the facts say +\./, 'the prose, link text included, stays; the bare form goes too');
});
