import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { sourceDecider, type SourceCommand, type SourceEvent } from '../../../src/domain/source/decider.js';

const registered: SourceEvent = {
  type: 'SourceRegistered',
  data: { origin: 'url', url: 'http://example.org/a', doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null },
};
const fetched: SourceEvent = {
  type: 'SourceFetched',
  data: {
    final_url: 'http://example.org/a',
    content_type: 'text/html',
    body_sha256: 'a'.repeat(64),
    body_bytes: 10,
    document_kind: 'html',
    title: 'A',
    published_at: null,
    text_sha256: 'b'.repeat(64),
    markdown_sha256: 'c'.repeat(64),
    text_chars: 5,
    images: [],
  },
};
const fact = { fact_id: 'f', content: 'A is B.', content_hash: 'd'.repeat(64), source_text: 'A is B.', chunk_index: 0 };
/** The fact as recorded: provenance fields filled with their defaults. */
const recordedFact = { ...fact, fact_kind: 'text' as const, image_id: null, sentence_index: -1 };
const given = spec(sourceDecider).given;

t.test('register', async (t) => {
  t.same(given([]).when({ type: 'RegisterSource', origin: 'url', url: 'http://example.org/a' }).events(), [registered]);
  t.equal(given([]).when({ type: 'RegisterSource', origin: 'url' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([]).when({ type: 'RegisterSource', origin: 'upload' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([registered]).when({ type: 'RegisterSource', origin: 'url', url: 'x' }).thenThrows(DomainError).code, 'conflict');
});

t.test('the pipeline moves pending → fetching → fetched → decomposing → processed, once', async (t) => {
  t.same(given([registered]).when({ type: 'StartFetch' }).events(), [{ type: 'SourceFetchStarted', data: { attempt: 1 } }]);
  const fetching: SourceEvent[] = [registered, { type: 'SourceFetchStarted', data: { attempt: 1 } }];
  t.same(given(fetching).when({ type: 'StartFetch' }).events(), [], 'a resumed fetch adds no event');
  t.same(given(fetching).when({ type: 'RecordFetch', fetched: fetched.data as never }).events(), [fetched]);
  t.same(given([...fetching, fetched]).when({ type: 'RecordFetch', fetched: fetched.data as never }).events(), [], 'a twin fetch records nothing');
  t.same(given([...fetching, fetched]).when({ type: 'StartDecomposition', modelId: 'm' }).events(), [{ type: 'SourceDecompositionStarted', data: { model_id: 'm' } }]);
  const decomposing: SourceEvent[] = [...fetching, fetched, { type: 'SourceDecompositionStarted', data: { model_id: 'm' } }];
  t.same(given(decomposing).when({ type: 'RecordFacts', modelId: 'm', facts: [fact] }).events(), [{ type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: '', facts: [recordedFact] } }]);
  const processed = [...decomposing, { type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: '', facts: [recordedFact] } } as SourceEvent];
  t.same(given(processed).when({ type: 'RecordFacts', modelId: 'm', facts: [fact] }).events(), [], 'facts are recorded once');
  t.same(given(processed).when({ type: 'FailSource', stage: 's', reason: 'r' }).events(), [], 'a processed source does not fail');
  t.equal(given([]).when({ type: 'StartFetch' }).thenThrows(DomainError).code, 'not_found');
});

t.test('failure and retry', async (t) => {
  const failed: SourceEvent[] = [registered, { type: 'SourceFailed', data: { stage: 'retrieve_source', reason: 'HTTP 410' } }];
  t.same(given(failed).when({ type: 'RetrySource' }).events(), [{ type: 'SourceRetryRequested', data: { previous_failure: 'retrieve_source: HTTP 410' } }]);
  t.equal(given([registered]).when({ type: 'RetrySource' }).thenThrows(DomainError).code, 'conflict');
  const retried = [...failed, { type: 'SourceRetryRequested', data: { previous_failure: 'x' } } as SourceEvent];
  t.same(given(retried).when({ type: 'StartFetch' }).events(), [{ type: 'SourceFetchStarted', data: { attempt: 1 } }], 'a retried source fetches again');
  const failedAfterFetch: SourceEvent[] = [registered, fetched, { type: 'SourceFailed', data: { stage: 'source_decomposition', reason: 'x' } }, { type: 'SourceRetryRequested', data: { previous_failure: 'x' } }];
  t.same(given(failedAfterFetch).when({ type: 'StartFetch' }).events(), [], 'a fetched source is not fetched again');
  t.equal(given(failedAfterFetch).when({ type: 'StartDecomposition', modelId: 'm' }).events().length, 1, 'but decomposed again');
});

const image = { image_id: 'img-1', sha256: 'e'.repeat(64), content_type: 'image/png', bytes: 120, url: 'http://example.org/a.png', alt_text: 'A chart', caption: null };
const fetching: SourceEvent[] = [registered, { type: 'SourceFetchStarted', data: { attempt: 1 } }];
const extracted: SourceEvent = { type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: 'p'.repeat(64), facts: [recordedFact] } };
const processed: SourceEvent[] = [...fetching, fetched, extracted];

t.test('fetches carry images; old fetches have none', async (t) => {
  const { images: _none, ...withoutImages } = fetched.data as Extract<SourceEvent, { type: 'SourceFetched' }>['data'];
  t.same(given(fetching).when({ type: 'RecordFetch', fetched: withoutImages }).events(), [fetched], 'images default to none');
  t.same(given(fetching).when({ type: 'RecordFetch', fetched: { ...withoutImages, images: [image] } }).events(), [
    { type: 'SourceFetched', data: { ...withoutImages, images: [image] } },
  ]);
  const oldFetch = { type: 'SourceFetched', data: withoutImages } as unknown as SourceEvent;
  const state = [...fetching, oldFetch].reduce(sourceDecider.evolve, sourceDecider.initialState());
  t.same(state.status !== 'none' && state.fetched?.images, [], 'an event from before images folds to no images');
});

t.test('facts carry promptset hash and provenance', async (t) => {
  const decomposing: SourceEvent[] = [...fetching, fetched];
  const imageFact = { ...fact, fact_id: 'g', fact_kind: 'image' as const, image_id: 'img-1', sentence_index: 0 };
  t.same(
    given(decomposing).when({ type: 'RecordFacts', modelId: 'm', promptsetHash: 'p'.repeat(64), facts: [{ ...fact, sentence_index: 2 }, imageFact] }).events(),
    [{ type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: 'p'.repeat(64), facts: [{ ...recordedFact, sentence_index: 2 }, imageFact] } }],
  );
  t.equal(
    given(decomposing).when({ type: 'RecordFacts', modelId: 'm', facts: [{ ...fact, fact_kind: 'image' }] }).thenThrows(DomainError).code,
    'invalid',
    'an image fact must name its image',
  );
});

t.test('embeddings: on a processed source, once per model', async (t) => {
  const record: Extract<SourceCommand, { type: 'RecordEmbeddings' }> = { type: 'RecordEmbeddings', model: 'local', dimensions: 2, vectors: [{ fact_id: 'f', vector: 'AAAAAAAAAAA=' }] };
  const embedded: SourceEvent = { type: 'FactsEmbedded', data: { model: 'local', dimensions: 2, vectors: record.vectors.map((v) => ({ ...v })) } };
  t.same(given(processed).when(record).events(), [embedded]);
  t.same(given([...processed, embedded]).when(record).events(), [], 'same model again records nothing');
  t.equal(given([...processed, embedded]).when({ ...record, model: 'openai' }).events().length, 1, 'another model is recorded');
  t.equal(given([...fetching, fetched]).when(record).thenThrows(DomainError).code, 'conflict', 'not before decomposition');
  t.equal(given([]).when(record).thenThrows(DomainError).code, 'not_found');
  t.equal(given(processed).when({ ...record, dimensions: 0 }).thenThrows(DomainError).code, 'invalid');
  t.equal(given(processed).when({ ...record, model: '' }).thenThrows(DomainError).code, 'invalid');
});

t.test('embeddings of a large source in parts: each fact once, the model embedded when every fact has a vector', async (t) => {
  const facts = ['f', 'g', 'h'].map((fact_id) => ({ ...recordedFact, fact_id, content_hash: fact_id.repeat(64) }));
  const extracted: SourceEvent[] = [registered, fetched, { type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: '', facts: [...facts, facts[0]] } }];
  const vector = (factId: string) => ({ fact_id: factId, vector: 'AAAAAAAAAAA=' });
  const record = (factIds: string[]): Extract<SourceCommand, { type: 'RecordEmbeddings' }> => ({ type: 'RecordEmbeddings', model: 'local', dimensions: 2, vectors: factIds.map(vector) });
  const part = (factIds: string[]): SourceEvent => ({ type: 'FactsEmbedded', data: { model: 'local', dimensions: 2, vectors: factIds.map(vector) } });
  const stateOf = (events: SourceEvent[]) => events.reduce(sourceDecider.evolve, sourceDecider.initialState());

  t.same(given(extracted).when(record(['f', 'g'])).events(), [part(['f', 'g'])], 'a first part');
  const first = [...extracted, part(['f', 'g'])];
  t.match(stateOf(first), { embeddedWith: [], embeddedFactIds: { local: ['f', 'g'] } }, 'not embedded until every fact has a vector');
  t.same(given(first).when(record(['f', 'g', 'h'])).events(), [part(['h'])], 'a retry records only the facts still missing');
  t.same(given(first).when(record(['g'])).events(), [], 'nothing new, nothing recorded');
  const all = [...first, part(['h'])];
  t.match(stateOf(all), { embeddedWith: ['local'], embeddedFactIds: { local: ['f', 'g', 'h'] } }, 'the last part completes the model');
  t.same(given(all).when(record(['h'])).events(), [], 'a complete model records nothing more');
  t.match(stateOf([...extracted, part(['f', 'g', 'h'])]), { embeddedWith: ['local'] }, 'one event with every vector (as always recorded) completes it');
  t.match(stateOf([...first, part(['f'])]), { embeddedWith: [], embeddedFactIds: { local: ['f', 'g'] } }, 'a vector seen again counts once');
  t.same(given(first).when({ ...record(['h']), model: 'openai' }).events(), [{ type: 'FactsEmbedded', data: { model: 'openai', dimensions: 2, vectors: [vector('h')] } }], 'models are apart');
  const other = given(first).when({ ...record(['h']), dimensions: 3 }).thenThrows(DomainError);
  t.match(other, { code: 'invalid', message: /earlier vectors of local have 2 dimensions, the embedder's have 3/ }, "a part of another dimension than the model's earlier parts is refused");
  t.match(stateOf(first), { embeddedDimensions: { local: 2 } });
  t.same(given(first).when({ ...record(['h']), model: 'openai', dimensions: 3 }).events().length, 1, "another model's dimension is its own");

  const empty: SourceEvent[] = [registered, fetched, { type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: '', facts: [] } }];
  t.same(given(empty).when(record([])).events(), [part([])], 'a source without facts records one empty event');
  t.match(stateOf([...empty, part([])]), { embeddedWith: ['local'] });
  t.same(given([...empty, part([])]).when(record([])).events(), [], 'once');
});

t.test('deduplication is recorded once', async (t) => {
  const record: Extract<SourceCommand, { type: 'RecordDeduplication' }> = { type: 'RecordDeduplication', stableFactIds: ['f'], merged: [{ fact_id: 'g', survivor_id: 'f' }] };
  const deduplicated: SourceEvent = { type: 'SourceFactsDeduplicated', data: { stable_fact_ids: ['f'], merged: [{ fact_id: 'g', survivor_id: 'f' }] } };
  t.same(given(processed).when(record).events(), [deduplicated]);
  t.same(given([...processed, deduplicated]).when(record).events(), []);
  t.equal(given(fetching).when(record).thenThrows(DomainError).code, 'conflict');
});

t.test('concept batches are recorded once per batch index', async (t) => {
  const record: Extract<SourceCommand, { type: 'RecordConceptBatch' }> = { type: 'RecordConceptBatch', modelId: 'local', promptsetHash: 'h', batchIndex: 1, batchCount: 2, links: [{ fact_id: 'f', concept_ids: ['c1', 'c2'] }] };
  const batch1: SourceEvent = {
    type: 'ConceptsExtracted',
    data: { model_id: 'local', promptset_hash: 'h', batch_index: 1, batch_count: 2, links: [{ fact_id: 'f', concept_ids: ['c1', 'c2'] }] },
  };
  t.same(given(processed).when(record).events(), [batch1]);
  t.same(given([...processed, batch1]).when(record).events(), [], 'the same batch again');
  t.equal(given([...processed, batch1]).when({ ...record, batchIndex: 0 }).events().length, 1, 'another batch');
  t.equal(given(processed).when({ ...record, batchIndex: 2 }).thenThrows(DomainError).code, 'invalid', 'index beyond the count');
  t.equal(given(processed).when({ ...record, batchIndex: -1 }).thenThrows(DomainError).code, 'invalid');
  t.equal(given(processed).when({ ...record, batchCount: 0, batchIndex: 0 }).thenThrows(DomainError).code, 'invalid');
  t.equal(given(processed).when({ ...record, links: [{ fact_id: '', concept_ids: [] }] }).thenThrows(DomainError).code, 'invalid');
  t.equal(given(processed).when({ ...record, links: [{ fact_id: 'f', concept_ids: [''] }] }).thenThrows(DomainError).code, 'invalid');
  t.equal(given(fetching).when(record).thenThrows(DomainError).code, 'conflict');
  const state = [...processed, batch1, batch1].reduce(sourceDecider.evolve, sourceDecider.initialState());
  t.same(state.status !== 'none' && state.conceptBatches, [1]);
});

t.test('deletion is final: later pipeline commands record nothing, a retry is refused', async (t) => {
  const deleted: SourceEvent = { type: 'SourceDeleted', data: { reason: 'duplicate upload' } };
  t.same(given([registered]).when({ type: 'DeleteSource', reason: 'duplicate upload' }).events(), [deleted]);
  t.same(given([registered]).when({ type: 'DeleteSource' }).events(), [{ type: 'SourceDeleted', data: { reason: null } }], 'the reason is optional');
  t.same(given([registered, deleted]).when({ type: 'DeleteSource' }).events(), [], 'deleting twice records nothing');
  t.equal(given([]).when({ type: 'DeleteSource' }).thenThrows(DomainError).code, 'not_found');
  const fetching: SourceEvent[] = [registered, { type: 'SourceFetchStarted', data: { attempt: 1 } }, deleted];
  t.same(given(fetching).when({ type: 'RecordFetch', fetched: fetched.data as never }).events(), [], 'a fetch that was under way when the source was deleted records nothing');
  t.same(given([registered, deleted]).when({ type: 'StartFetch' }).events(), []);
  t.same(given([registered, deleted]).when({ type: 'FailSource', stage: 's', reason: 'r' }).events(), []);
  const failed: SourceEvent[] = [registered, { type: 'SourceFailed', data: { stage: 's', reason: 'r' } }, deleted];
  t.equal(given(failed).when({ type: 'RetrySource' }).thenThrows(DomainError).code, 'gone');
  t.equal(given([registered, deleted]).when({ type: 'RegisterSource', origin: 'url', url: 'x' }).thenThrows(DomainError).code, 'conflict', 'the id is never reused');
});
