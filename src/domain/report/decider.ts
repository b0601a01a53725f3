import { DomainError, type Decider } from '../decider.js';
import type { AnnotatedSentence, AnnotationSettings, ReportEvent } from './events.js';
import { checkedTitle } from '../text.js';
import { runeLength } from '../../util/codePoints.js';

export * from './events.js';

/**
 * Largest report text, in UTF-8 bytes (256 KiB: a long article; about 40,000 words). A larger
 * text is refused whole (HTTP 413), typed or uploaded.
 */
export const MAX_REPORT_BYTES = 256 * 1024;
/** Longest title and topic, in characters. */
export const MAX_REPORT_TITLE_CHARS = 500;
export const MAX_REPORT_TOPIC_CHARS = 500;

/** A report text over MAX_REPORT_BYTES: refused, nothing recorded. The HTTP layer answers 413. */
export class ReportTooLargeError extends DomainError {
  constructor(bytes: number) {
    super('invalid', `the report text is ${bytes} bytes; the limit is ${MAX_REPORT_BYTES} bytes (256 KiB)`);
  }
}

export type ReportStatus = 'pending' | 'processing' | 'annotated' | 'failed';

/** The last annotation recorded: what an edit may carry over for sentences it left alone. */
export interface RecordedAnnotation extends AnnotationSettings {
  revision: number;
  modelId: string;
  sentences: AnnotatedSentence[];
}

export interface LiveReport {
  status: ReportStatus;
  title: string;
  text: string;
  topic: string | null;
  parentId: string | null;
  /** Opened by each text change and each annotation request. */
  revision: number;
  /** True when the current revision was opened by an annotation request: every sentence is annotated anew. */
  fullRequested: boolean;
  annotation: RecordedAnnotation | null;
  failure: string | null;
}

export type ReportState = { status: 'none' } | { status: 'deleted' } | LiveReport;

/**
 * Fields of a new or edited report. `parentChain` is the parent and its ancestors as the
 * caller read them (parent first): the decider refuses a chain that comes back to the report.
 * The caller (src/app/reports.ts) has checked that the parent exists in the repository.
 */
export type ReportCommand =
  | {
      type: 'CreateReport';
      reportId: string;
      title: string;
      text: string;
      topic?: string | null;
      parentId?: string | null;
      origin?: 'text' | 'upload';
      filename?: string | null;
    }
  | {
      type: 'UpdateReport';
      reportId: string;
      title?: string;
      text?: string;
      /** undefined: keep; null: clear. */
      topic?: string | null;
      parentId?: string | null;
      parentChain?: readonly string[];
    }
  | { type: 'DeleteReport'; childCount: number }
  | { type: 'RequestAnnotation' }
  | { type: 'StartAnnotation'; revision: number }
  | ({ type: 'RecordAnnotation'; revision: number; modelId: string; sentences: AnnotatedSentence[] } & AnnotationSettings)
  | { type: 'FailAnnotation'; revision: number; reason: string };

function requireLive(state: ReportState): LiveReport {
  if (state.status === 'none' || state.status === 'deleted') throw new DomainError('not_found', 'report not found');
  return state;
}

/** The text as stored: line ends normalised; refused when empty or over the limit. */
function checkReportText(text: string): string {
  const normalized = text.replace(/\r\n?/g, '\n');
  if (normalized.trim() === '') throw new DomainError('invalid', 'the report text is empty');
  const bytes = Buffer.byteLength(normalized, 'utf8');
  if (bytes > MAX_REPORT_BYTES) throw new ReportTooLargeError(bytes);
  return normalized;
}

function checkTitle(title: string): string {
  return checkedTitle(title, MAX_REPORT_TITLE_CHARS, 'report title');
}

function checkTopic(topic: string | null | undefined): string | null {
  const trimmed = topic?.trim() ?? '';
  if (trimmed === '') return null;
  if (runeLength(trimmed) > MAX_REPORT_TOPIC_CHARS) throw new DomainError('invalid', `the report topic is longer than ${MAX_REPORT_TOPIC_CHARS} characters`);
  return trimmed;
}

function checkParent(reportId: string, parentId: string | null | undefined, chain: readonly string[]): string | null {
  if (parentId === null || parentId === undefined || parentId === '') return null;
  if (parentId === reportId || chain.includes(reportId)) {
    throw new DomainError('invalid', `report ${parentId} cannot be the parent: its parents lead back to this report (a cycle)`);
  }
  return parentId;
}

export const reportDecider: Decider<ReportState, ReportCommand, ReportEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'CreateReport': {
        if (state.status !== 'none') throw new DomainError('conflict', 'report already exists');
        const text = checkReportText(command.text);
        return [
          {
            type: 'ReportCreated',
            data: {
              title: checkTitle(command.title),
              text,
              topic: checkTopic(command.topic),
              parent_id: checkParent(command.reportId, command.parentId, []),
              origin: command.origin ?? 'text',
              filename: command.filename ?? null,
            },
          },
        ];
      }
      case 'UpdateReport': {
        const report = requireLive(state);
        const title = command.title === undefined ? report.title : checkTitle(command.title);
        const text = command.text === undefined ? report.text : checkReportText(command.text);
        const topic = command.topic === undefined ? report.topic : checkTopic(command.topic);
        const parentId = command.parentId === undefined ? report.parentId : checkParent(command.reportId, command.parentId, command.parentChain ?? []);
        if (title === report.title && text === report.text && topic === report.topic && parentId === report.parentId) return [];
        return [{ type: 'ReportUpdated', data: { title, text, topic, parent_id: parentId, text_changed: text !== report.text } }];
      }
      case 'DeleteReport': {
        if (state.status === 'deleted') return [];
        requireLive(state);
        if (command.childCount > 0) {
          throw new DomainError('conflict', `the report has ${command.childCount} child report(s): delete them or give them another parent first`);
        }
        return [{ type: 'ReportDeleted', data: {} }];
      }
      case 'RequestAnnotation': {
        const report = requireLive(state);
        return [{ type: 'ReportAnnotationRequested', data: { revision: report.revision + 1 } }];
      }
      case 'StartAnnotation': {
        if (state.status === 'none' || state.status === 'deleted') return [];
        // Only the current revision; a crashed run resumes from `processing` without a new event.
        if (command.revision !== state.revision || (state.status !== 'pending' && state.status !== 'failed')) return [];
        return [{ type: 'ReportAnnotationStarted', data: { revision: command.revision } }];
      }
      case 'RecordAnnotation': {
        if (state.status === 'none' || state.status === 'deleted') return [];
        // A stale annotation (the text changed meanwhile) or a twin's second one records nothing.
        if (command.revision !== state.revision || state.status === 'annotated') return [];
        const indexes = new Set<number>();
        for (const sentence of command.sentences) {
          if (indexes.has(sentence.index)) throw new DomainError('invalid', `sentence ${sentence.index} is annotated twice`);
          indexes.add(sentence.index);
          if (sentence.facts.length > command.max_facts_per_sentence) {
            throw new DomainError('invalid', `sentence ${sentence.index} has more than ${command.max_facts_per_sentence} facts`);
          }
        }
        return [
          {
            type: 'ReportAnnotated',
            data: {
              revision: command.revision,
              model_id: command.modelId,
              similarity_threshold: command.similarity_threshold,
              max_facts_per_sentence: command.max_facts_per_sentence,
              min_sentence_runes: command.min_sentence_runes,
              sentences: command.sentences,
            },
          },
        ];
      }
      case 'FailAnnotation': {
        if (state.status === 'none' || state.status === 'deleted') return [];
        if (command.revision !== state.revision || state.status === 'annotated' || state.status === 'failed') return [];
        return [{ type: 'ReportAnnotationFailed', data: { revision: command.revision, reason: command.reason } }];
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'ReportCreated':
        return {
          status: 'pending',
          title: event.data.title,
          text: event.data.text,
          topic: event.data.topic,
          parentId: event.data.parent_id,
          revision: 1,
          fullRequested: false,
          annotation: null,
          failure: null,
        };
      case 'ReportDeleted':
        return { status: 'deleted' };
    }
    if (state.status === 'none' || state.status === 'deleted') return state;
    switch (event.type) {
      case 'ReportUpdated': {
        const fields = { title: event.data.title, text: event.data.text, topic: event.data.topic, parentId: event.data.parent_id };
        if (!event.data.text_changed) return { ...state, ...fields };
        return { ...state, ...fields, status: 'pending', revision: state.revision + 1, fullRequested: false, failure: null };
      }
      case 'ReportAnnotationRequested':
        return { ...state, status: 'pending', revision: event.data.revision, fullRequested: true, failure: null };
      case 'ReportAnnotationStarted':
        return { ...state, status: 'processing' };
      case 'ReportAnnotated':
        return {
          ...state,
          status: 'annotated',
          failure: null,
          annotation: {
            revision: event.data.revision,
            modelId: event.data.model_id,
            similarity_threshold: event.data.similarity_threshold,
            max_facts_per_sentence: event.data.max_facts_per_sentence,
            min_sentence_runes: event.data.min_sentence_runes,
            sentences: event.data.sentences,
          },
        };
      case 'ReportAnnotationFailed':
        return { ...state, status: 'failed', failure: event.data.reason };
    }
    return state;
  },
};
