import { DomainError, type Decider } from '../decider.js';

/** Source status as the API shows it: pending → fetching → fetched → decomposing → processed, or failed. */
export type SourceStatus = 'pending' | 'fetching' | 'fetched' | 'decomposing' | 'processed' | 'failed';

export interface ExtractedFactRecord {
  fact_id: string;
  content: string;
  content_hash: string;
  source_text: string;
  chunk_index: number;
}

export type SourceEvent =
  | {
      type: 'SourceRegistered';
      data: {
        origin: 'url' | 'doi' | 'upload';
        url: string | null;
        doi: string | null;
        filename: string | null;
        content_type: string | null;
        /** For uploads: the stored body, addressed by its SHA-256. */
        body_sha256: string | null;
        body_bytes: number | null;
      };
    }
  | { type: 'SourceFetchStarted'; data: { attempt: number } }
  | {
      type: 'SourceFetched';
      data: {
        final_url: string | null;
        content_type: string;
        body_sha256: string;
        body_bytes: number;
        document_kind: string;
        title: string | null;
        published_at: string | null;
        /** Extracted plain text and Markdown, stored as blobs addressed by SHA-256. */
        text_sha256: string;
        markdown_sha256: string;
        text_chars: number;
      };
    }
  | { type: 'SourceDecompositionStarted'; data: { model_id: string } }
  | { type: 'FactsExtracted'; data: { model_id: string; facts: ExtractedFactRecord[] } }
  | { type: 'SourceFailed'; data: { stage: string; reason: string } }
  | { type: 'SourceRetryRequested'; data: { previous_failure: string | null } };

export type SourceCommand =
  | {
      type: 'RegisterSource';
      origin: 'url' | 'doi' | 'upload';
      url?: string | null;
      doi?: string | null;
      filename?: string | null;
      contentType?: string | null;
      bodySha256?: string | null;
      bodyBytes?: number | null;
    }
  | { type: 'StartFetch' }
  | { type: 'RecordFetch'; fetched: Extract<SourceEvent, { type: 'SourceFetched' }>['data'] }
  | { type: 'StartDecomposition'; modelId: string }
  | { type: 'RecordFacts'; modelId: string; facts: ExtractedFactRecord[] }
  | { type: 'FailSource'; stage: string; reason: string }
  | { type: 'RetrySource' };

export type SourceState =
  | { status: 'none' }
  | {
      status: SourceStatus;
      origin: 'url' | 'doi' | 'upload';
      fetchAttempts: number;
      fetched: Extract<SourceEvent, { type: 'SourceFetched' }>['data'] | null;
      failure: string | null;
      factCount: number;
    };

function requireSource(state: SourceState): Exclude<SourceState, { status: 'none' }> {
  if (state.status === 'none') throw new DomainError('not_found', 'source not found');
  return state;
}

export const sourceDecider: Decider<SourceState, SourceCommand, SourceEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'RegisterSource': {
        if (state.status !== 'none') throw new DomainError('conflict', 'source already exists');
        const url = command.url ?? null;
        const doi = command.doi ?? null;
        if (command.origin === 'url' && !url) throw new DomainError('invalid', 'url is required');
        if (command.origin === 'doi' && !doi) throw new DomainError('invalid', 'doi is required');
        if (command.origin === 'upload' && !command.bodySha256) throw new DomainError('invalid', 'upload body is required');
        return [
          {
            type: 'SourceRegistered',
            data: {
              origin: command.origin,
              url,
              doi,
              filename: command.filename ?? null,
              content_type: command.contentType ?? null,
              body_sha256: command.bodySha256 ?? null,
              body_bytes: command.bodyBytes ?? null,
            },
          },
        ];
      }
      case 'StartFetch': {
        const source = requireSource(state);
        // Only a pending source starts fetching; a crashed run resumes from `fetching` without a new event.
        if (source.status !== 'pending') return [];
        return [{ type: 'SourceFetchStarted', data: { attempt: source.fetchAttempts + 1 } }];
      }
      case 'RecordFetch': {
        const source = requireSource(state);
        if (source.status !== 'pending' && source.status !== 'fetching') return [];
        return [{ type: 'SourceFetched', data: command.fetched }];
      }
      case 'StartDecomposition': {
        const source = requireSource(state);
        if (source.status !== 'fetched') return [];
        return [{ type: 'SourceDecompositionStarted', data: { model_id: command.modelId } }];
      }
      case 'RecordFacts': {
        const source = requireSource(state);
        if (source.status !== 'fetched' && source.status !== 'decomposing') return [];
        return [{ type: 'FactsExtracted', data: { model_id: command.modelId, facts: command.facts } }];
      }
      case 'FailSource': {
        const source = requireSource(state);
        if (source.status === 'processed' || source.status === 'failed') return [];
        return [{ type: 'SourceFailed', data: { stage: command.stage, reason: command.reason } }];
      }
      case 'RetrySource': {
        const source = requireSource(state);
        if (source.status !== 'failed') throw new DomainError('conflict', `source is ${source.status}, not failed`);
        return [{ type: 'SourceRetryRequested', data: { previous_failure: source.failure } }];
      }
    }
  },

  evolve(state, event) {
    if (event.type === 'SourceRegistered') {
      return { status: 'pending', origin: event.data.origin, fetchAttempts: 0, fetched: null, failure: null, factCount: 0 };
    }
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'SourceFetchStarted':
        return { ...state, status: 'fetching', fetchAttempts: event.data.attempt };
      case 'SourceFetched':
        return { ...state, status: 'fetched', fetched: event.data };
      case 'SourceDecompositionStarted':
        return { ...state, status: 'decomposing' };
      case 'FactsExtracted':
        return { ...state, status: 'processed', factCount: event.data.facts.length };
      case 'SourceFailed':
        return { ...state, status: 'failed', failure: `${event.data.stage}: ${event.data.reason}` };
      case 'SourceRetryRequested':
        // A retry starts over from whatever the source already has.
        return { ...state, status: state.fetched ? 'fetched' : 'pending', failure: null };
    }
  },
};
