import { DomainError, type Decider } from '../decider.js';
import type { SourcePipelineCommand, SourcePipelineEvent } from './pipelineEvents.js';

export type { SourcePipelineCommand, SourcePipelineEvent } from './pipelineEvents.js';

/** Source status as the API shows it: pending → fetching → fetched → decomposing → processed, or failed. */
export type SourceStatus = 'pending' | 'fetching' | 'fetched' | 'decomposing' | 'processed' | 'failed';

export type ExtractedFactRecord = {
  fact_id: string;
  content: string;
  content_hash: string;
  source_text: string;
  chunk_index: number;
  /** `text` from the source's text, `image` from one of its images. */
  fact_kind: 'text' | 'image';
  /** For image facts: the image (SourceFetched.images) the fact came from. */
  image_id: string | null;
  /** 0-based sentence within the chunk; -1 when unknown. */
  sentence_index: number;
};

/**
 * A fact as RecordFacts takes it: the provenance fields added with the pipeline may be left out
 * (text fact, no image, sentence unknown), as they are in events recorded before them.
 */
export type ExtractedFactInput = Omit<ExtractedFactRecord, 'fact_kind' | 'image_id' | 'sentence_index'> &
  Partial<Pick<ExtractedFactRecord, 'fact_kind' | 'image_id' | 'sentence_index'>>;

/** An image of a fetched source; its bytes live in the asset store under `sha256`. */
export type SourceImage = {
  /** Stable id of the image within the repository. */
  image_id: string;
  sha256: string;
  content_type: string;
  /** Size in bytes. */
  bytes: number;
  url: string | null;
  alt_text: string | null;
  caption: string | null;
};

/** SourceFetched's data. */
export type FetchedSourceData = {
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
  /** Images found in the source (empty in events recorded before images were kept). */
  images: SourceImage[];
};

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
  | { type: 'SourceFetched'; data: FetchedSourceData }
  | { type: 'SourceDecompositionStarted'; data: { model_id: string } }
  | {
      type: 'FactsExtracted';
      /** `promptset_hash` is "" in events recorded before promptsets existed. */
      data: { model_id: string; promptset_hash: string; facts: ExtractedFactRecord[] };
    }
  | { type: 'SourceFailed'; data: { stage: string; reason: string } }
  | { type: 'SourceRetryRequested'; data: { previous_failure: string | null } }
  /** The source leaves the repository; cleanup_facts retracts the facts no other source has. */
  | { type: 'SourceDeleted'; data: { reason: string | null } }
  | SourcePipelineEvent;

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
  | { type: 'RecordFetch'; fetched: Omit<FetchedSourceData, 'images'> & { images?: SourceImage[] } }
  | { type: 'StartDecomposition'; modelId: string }
  | { type: 'RecordFacts'; modelId: string; promptsetHash?: string; facts: ExtractedFactInput[] }
  | { type: 'FailSource'; stage: string; reason: string }
  | { type: 'RetrySource' }
  | { type: 'DeleteSource'; reason?: string }
  | SourcePipelineCommand;

export type SourceState =
  | { status: 'none' }
  | {
      status: SourceStatus;
      origin: 'url' | 'doi' | 'upload';
      fetchAttempts: number;
      fetched: FetchedSourceData | null;
      failure: string | null;
      factCount: number;
      /** The distinct fact ids of FactsExtracted, in their first order. */
      factIds: string[];
      /**
       * Embedding models every fact of the source has a vector of (its FactsEmbedded, in one event
       * or in several parts, cover every fact; a source without facts needs one, empty, event).
       */
      embeddedWith: string[];
      /** Per embedding model, the fact ids with a vector of it so far: what a retry of embed_facts still lacks is the rest. */
      embeddedFactIds: Record<string, string[]>;
      /** Per embedding model, the dimension of its first part: every later part must have it (mixedDimensions). */
      embeddedDimensions: Record<string, number>;
      deduplicated: boolean;
      /** batch_index of every ConceptsExtracted recorded. */
      conceptBatches: number[];
      /** SourceDeleted recorded: the pipeline records nothing more for it. */
      deleted: boolean;
    };

function requireSource(state: SourceState): Exclude<SourceState, { status: 'none' }> {
  if (state.status === 'none') throw new DomainError('not_found', 'source not found');
  return state;
}

/** Pipeline stages after decomposition run on a processed source only. */
function requireProcessed(state: SourceState, stage: string): Exclude<SourceState, { status: 'none' }> {
  const source = requireSource(state);
  if (source.status !== 'processed') throw new DomainError('conflict', `${stage} needs a processed source; this one is ${source.status}`);
  return source;
}

function checkLinks(links: ReadonlyArray<{ fact_id: string; concept_ids: string[] }>): void {
  for (const link of links) {
    if (!link.fact_id) throw new DomainError('invalid', 'a concept link needs a fact id');
    if (link.concept_ids.some((id) => !id)) throw new DomainError('invalid', `fact ${link.fact_id} has an empty concept id`);
  }
}

/**
 * Why vectors of `dimensions` cannot join the source's earlier parts of `model`, or null: the
 * parts of one model must share a dimension, or k-NN compares vectors of different lengths (the
 * index refuses them, and deduplication stops on them). A model server that changes its output,
 * or a changed `providers.embeddings.dimensions` between a failed part and its retry, would mix them.
 */
export function mixedDimensions(source: { embeddedDimensions: Readonly<Record<string, number>> }, model: string, dimensions: number): string | null {
  const earlier = source.embeddedDimensions[model];
  if (earlier === undefined || earlier === dimensions) return null;
  return (
    `the source's earlier vectors of ${model} have ${earlier} dimensions, the embedder's have ${dimensions}: ` +
    `the vectors of one model must have one dimension; set providers.embeddings.dimensions back to ${earlier}, or embed with another model`
  );
}

export const sourceDecider: Decider<SourceState, SourceCommand, SourceEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    if (state.status !== 'none' && state.deleted && command.type !== 'RegisterSource') {
      // A deleted source is final: deleting again changes nothing, a retry is refused, and a
      // pipeline job that was queued before the deletion records nothing.
      if (command.type === 'RetrySource') throw new DomainError('gone', 'source was deleted');
      return [];
    }
    switch (command.type) {
      case 'DeleteSource': {
        requireSource(state);
        return [{ type: 'SourceDeleted', data: { reason: command.reason ?? null } }];
      }
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
        return [{ type: 'SourceFetched', data: { ...command.fetched, images: command.fetched.images ?? [] } }];
      }
      case 'StartDecomposition': {
        const source = requireSource(state);
        if (source.status !== 'fetched') return [];
        return [{ type: 'SourceDecompositionStarted', data: { model_id: command.modelId } }];
      }
      case 'RecordFacts': {
        const source = requireSource(state);
        if (source.status !== 'fetched' && source.status !== 'decomposing') return [];
        const facts: ExtractedFactRecord[] = command.facts.map((fact) => ({
          ...fact,
          fact_kind: fact.fact_kind ?? 'text',
          image_id: fact.image_id ?? null,
          sentence_index: fact.sentence_index ?? -1,
        }));
        const imageFactWithoutImage = facts.find((fact) => fact.fact_kind === 'image' && !fact.image_id);
        if (imageFactWithoutImage) throw new DomainError('invalid', `image fact ${imageFactWithoutImage.fact_id} names no image`);
        return [{ type: 'FactsExtracted', data: { model_id: command.modelId, promptset_hash: command.promptsetHash ?? '', facts } }];
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
      case 'RecordEmbeddings': {
        const source = requireProcessed(state, 'embed_facts');
        if (source.embeddedWith.includes(command.model)) return [];
        if (!command.model) throw new DomainError('invalid', 'embedding model must be named');
        if (!Number.isInteger(command.dimensions) || command.dimensions <= 0)
          throw new DomainError('invalid', 'dimensions must be a positive integer');
        const mixed = mixedDimensions(source, command.model, command.dimensions);
        if (mixed !== null) throw new DomainError('invalid', mixed);
        // One part of several: a fact that has a vector of this model already (an earlier part,
        // recorded before a crash or by a twin) is not recorded again.
        const recorded = new Set(source.embeddedFactIds[command.model] ?? []);
        const vectors = recorded.size === 0 ? command.vectors : command.vectors.filter((entry) => !recorded.has(entry.fact_id));
        // Nothing new for a source with facts; a source without any still records its one empty event.
        if (vectors.length === 0 && source.factIds.length > 0) return [];
        return [{ type: 'FactsEmbedded', data: { model: command.model, dimensions: command.dimensions, vectors } }];
      }
      case 'RecordDeduplication': {
        const source = requireProcessed(state, 'deduplicate_facts');
        if (source.deduplicated) return [];
        return [{ type: 'SourceFactsDeduplicated', data: { stable_fact_ids: command.stableFactIds, merged: command.merged } }];
      }
      case 'RecordConceptBatch': {
        const source = requireProcessed(state, 'extract_concepts');
        if (!Number.isInteger(command.batchCount) || command.batchCount < 1)
          throw new DomainError('invalid', 'batch count must be a positive integer');
        if (!Number.isInteger(command.batchIndex) || command.batchIndex < 0 || command.batchIndex >= command.batchCount)
          throw new DomainError('invalid', `batch index ${command.batchIndex} is not within 0..${command.batchCount - 1}`);
        if (source.conceptBatches.includes(command.batchIndex)) return [];
        checkLinks(command.links);
        return [
          {
            type: 'ConceptsExtracted',
            data: {
              model_id: command.modelId,
              promptset_hash: command.promptsetHash,
              batch_index: command.batchIndex,
              batch_count: command.batchCount,
              links: command.links,
            },
          },
        ];
      }
    }
  },

  evolve(state, event) {
    if (event.type === 'SourceRegistered') {
      return {
        status: 'pending',
        origin: event.data.origin,
        fetchAttempts: 0,
        fetched: null,
        failure: null,
        factCount: 0,
        factIds: [],
        embeddedWith: [],
        embeddedFactIds: {},
        embeddedDimensions: {},
        deduplicated: false,
        conceptBatches: [],
        deleted: false,
      };
    }
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'SourceFetchStarted':
        return { ...state, status: 'fetching', fetchAttempts: event.data.attempt };
      case 'SourceFetched':
        // Events recorded before images were kept have none.
        return { ...state, status: 'fetched', fetched: { ...event.data, images: event.data.images ?? [] } };
      case 'SourceDecompositionStarted':
        return { ...state, status: 'decomposing' };
      case 'FactsExtracted':
        return { ...state, status: 'processed', factCount: event.data.facts.length, factIds: [...new Set(event.data.facts.map((fact) => fact.fact_id))] };
      case 'SourceFailed':
        return { ...state, status: 'failed', failure: `${event.data.stage}: ${event.data.reason}` };
      case 'SourceRetryRequested':
        // A retry starts over from whatever the source already has.
        return { ...state, status: state.fetched ? 'fetched' : 'pending', failure: null };
      case 'FactsEmbedded': {
        const { model } = event.data;
        if (state.embeddedWith.includes(model)) return state;
        // A part of the source's vectors: the model is complete once every fact has one (an
        // event recorded before parts existed held them all, and completes it as it always did).
        const known = state.embeddedFactIds[model] ?? [];
        const withVector = new Set(known);
        const added: string[] = [];
        for (const { fact_id: factId } of event.data.vectors) {
          if (withVector.has(factId)) continue;
          withVector.add(factId);
          added.push(factId);
        }
        const complete = state.factIds.every((factId) => withVector.has(factId));
        return {
          ...state,
          embeddedFactIds: { ...state.embeddedFactIds, [model]: [...known, ...added] },
          embeddedDimensions: model in state.embeddedDimensions ? state.embeddedDimensions : { ...state.embeddedDimensions, [model]: event.data.dimensions },
          embeddedWith: complete ? [...state.embeddedWith, model] : state.embeddedWith,
        };
      }
      case 'SourceFactsDeduplicated':
        return { ...state, deduplicated: true };
      case 'SourceDeleted':
        return { ...state, deleted: true };
      case 'ConceptsExtracted':
        return state.conceptBatches.includes(event.data.batch_index)
          ? state
          : { ...state, conceptBatches: [...state.conceptBatches, event.data.batch_index] };
    }
  },
};
