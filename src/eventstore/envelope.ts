/**
 * The event envelope every stored event carries (DESIGN.md, "Events").
 * Positions and versions are JS numbers: safe up to 2^53, far beyond any log we will hold.
 */

// The domain's event type lives in the domain; re-exported here so the store's users that import
// it with the envelope keep compiling.
export type { DomainEvent } from '../domain/event.js';

/** Who caused an event and why: stamped by the command handler, never by the store. */
export interface EventMetadata {
  /** Repository the event belongs to; null for system-wide streams (users, oauth clients). */
  repositoryId: string | null;
  /** A user id, or `system:<stage>` for pipeline stages. */
  actor: string;
  /** Id of the event (or request) that directly caused this one. */
  causationId: string | null;
  /** Id shared by every event of one user action, across stages. */
  correlationId: string | null;
}

/** An event as a command produces it, before the store assigns identity and order. */
export interface NewEvent<Type extends string = string, Data = Record<string, unknown>> {
  type: Type;
  data: Data;
  /** Version of the event type's schema; defaults to 1. */
  schemaVersion?: number;
  /** Lets a caller fix the id (e.g. for idempotent retries); a UUID v4 is generated otherwise. */
  eventId?: string;
  metadata: EventMetadata;
}

/** An event as the store recorded it. */
export interface RecordedEvent<Type extends string = string, Data = Record<string, unknown>>
  extends EventMetadata {
  eventId: string;
  streamId: string;
  /** 0-based position of the event within its stream. */
  streamVersion: number;
  /** 1-based position in the global log, assigned by the store; strictly increasing, gap-free for readers. */
  globalPosition: number;
  type: Type;
  schemaVersion: number;
  data: Data;
  /** RFC 3339 time at which the store recorded the event. */
  occurredAt: string;
}

/** `event` without the `data` fields `omitData` names for its type (ReadStreamsOptions, for adapters that read whole events). */
export function withoutOmittedData(event: RecordedEvent, omitData: Readonly<Record<string, readonly string[]>> | undefined): RecordedEvent {
  const omitted = omitData?.[event.type];
  if (!omitted || omitted.length === 0) return event;
  const data = { ...event.data };
  for (const field of omitted) delete data[field];
  return { ...event, data };
}

/** Stream names of DESIGN.md: `<category>-<id>`. */
export const streamCategories = [
  'repository',
  'source',
  'fact',
  'concept',
  'report',
  'investigation',
  'user',
  'oauthclient',
  'apikey',
] as const;
export type StreamCategory = (typeof streamCategories)[number];

export function streamName(category: StreamCategory, id: string): string {
  return `${category}-${id}`;
}

export function parseStreamName(streamId: string): { category: string; id: string } {
  const dash = streamId.indexOf('-');
  if (dash < 0) return { category: streamId, id: '' };
  return { category: streamId.slice(0, dash), id: streamId.slice(dash + 1) };
}
