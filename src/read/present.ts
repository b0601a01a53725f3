import type { RecordedEvent } from '../eventstore/envelope.js';
import type { JobRecord } from '../pipeline/jobs.js';
import { isoTimestampOrNull } from '../db/timestamps.js';

/**
 * Presentation: read-model rows and records as the JSON shapes every transport answers with
 * (docs/api.md). Leaf module, so the query modules can share it without importing each other.
 */

/** A jsonb column: parsed by pg and PGlite, text from some drivers. */
export function jsonColumn(value: unknown): unknown {
  return typeof value === 'string' ? JSON.parse(value) : value;
}

/** A jsonb column holding a list of ids (`fact_ids`, `slice_ids`, …): its strings; none when it is not a list. */
export function idListColumn(value: unknown): string[] {
  const parsed = jsonColumn(value);
  return Array.isArray(parsed) ? parsed.filter((item): item is string => typeof item === 'string') : [];
}

export type FactRow = Record<string, unknown> & { id: string; created_at: Date | string };

/**
 * A fact row as answered: its columns but the read model's own (the generated search vector and
 * the pipeline's bookkeeping), the date as ISO text. Every transport answers this shape; REST's
 * response schema (docs/api.md) lists the same fields.
 */
export function presentFact(row: FactRow): Record<string, unknown> & { id: string; created_at: string | null } {
  const { search: _search, embedding_model: _embeddingModel, stable_since: _stableSince, unsourced: _unsourced, ...fact } = row;
  return { ...fact, created_at: isoTimestampOrNull(row.created_at) };
}

export type SourceRow = Record<string, unknown> & {
  id: string;
  repository_id: string;
  status: string;
  document_kind: string | null;
  created_at: Date | string;
  updated_at: Date | string;
  body_bytes: string | number | null;
};

/**
 * A source row as answered: without the pipeline's digests and counts of its stored text, nor the
 * duplicate lookup's `reference_key` (`kind` is `document_kind`).
 */
export function presentSource(row: SourceRow) {
  const { document_kind: _documentKind, body_sha256: _body, text_sha256: _text, markdown_sha256: _markdown, text_chars: _chars, reference_key: _referenceKey, ...source } = row;
  return {
    ...source,
    kind: row.document_kind,
    body_bytes: row.body_bytes === null ? null : Number(row.body_bytes),
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
  };
}

export function presentJob(job: JobRecord) {
  return {
    id: job.id,
    kind: job.kind,
    repository_id: job.repositoryId,
    subject_id: job.subjectId,
    source_id: job.sourceId,
    report_id: job.reportId,
    trigger_event_id: job.triggerEventId,
    state: job.state,
    attempts: job.attempts,
    max_attempts: job.maxAttempts,
    last_error: job.lastError,
    next_attempt_at: job.nextAttemptAt,
    created_at: job.createdAt,
    updated_at: job.updatedAt,
    finished_at: job.finishedAt,
  };
}

export function presentEvent(event: RecordedEvent) {
  return {
    event_id: event.eventId,
    stream_id: event.streamId,
    stream_version: event.streamVersion,
    global_position: event.globalPosition,
    type: event.type,
    schema_version: event.schemaVersion,
    repository_id: event.repositoryId,
    actor: event.actor,
    causation_id: event.causationId,
    correlation_id: event.correlationId,
    occurred_at: event.occurredAt,
    data: event.data,
  };
}
