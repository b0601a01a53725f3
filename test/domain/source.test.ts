import t from 'tap';
import { DomainError } from '../../src/domain/decider.js';
import { spec } from '../../src/domain/testing.js';
import { sourceDecider, type SourceEvent } from '../../src/domain/source/decider.js';

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
  },
};
const fact = { fact_id: 'f', content: 'A is B.', content_hash: 'd'.repeat(64), source_text: 'A is B.', chunk_index: 0 };
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
  t.same(given(decomposing).when({ type: 'RecordFacts', modelId: 'm', facts: [fact] }).events(), [{ type: 'FactsExtracted', data: { model_id: 'm', facts: [fact] } }]);
  const processed = [...decomposing, { type: 'FactsExtracted', data: { model_id: 'm', facts: [fact] } } as SourceEvent];
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
