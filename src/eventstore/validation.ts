import { randomUUID } from 'node:crypto';
import type { NewEvent } from './envelope.js';
import { InvalidEventError, type ExpectedVersion } from './port.js';
import type { EventSchemaRegistry } from './schemas.js';
import { isUuid } from '../util/uuid.js';

/** An event that passed every check an adapter makes before it touches its storage. */
export interface ValidatedEvent {
  eventId: string;
  type: string;
  schemaVersion: number;
  repositoryId: string | null;
  actor: string;
  causationId: string | null;
  correlationId: string | null;
  /** The data as the schema registry normalised it (missing optional fields as null). */
  data: Record<string, unknown>;
}

export function checkExpectedVersion(expected: ExpectedVersion): void {
  if (expected === 'no_stream' || expected === 'stream_exists' || expected === 'any') return;
  if (typeof expected !== 'number' || !Number.isInteger(expected) || expected < 0 || expected > 2147483647) {
    throw new RangeError(`expected version must be no_stream, stream_exists, any or a version >= 0, got ${String(expected)}`);
  }
}

function optionalText(value: unknown, eventType: string, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new InvalidEventError(eventType, `metadata.${field} must be a string or null`);
  return value;
}

/**
 * Validates a whole batch (schema, ids, schema version, envelope metadata) before anything is
 * stored; throws InvalidEventError on the first bad event. Every store adapter uses it, so an
 * event one store accepts the other accepts too and a log stays copyable between them.
 */
export function validateNewEvents(schemas: EventSchemaRegistry, events: readonly NewEvent[]): ValidatedEvent[] {
  const seenIds = new Set<string>();
  return events.map((event, index) => {
    const eventType = typeof event?.type === 'string' && event.type !== '' ? event.type : `#${index} (no type)`;
    if (eventType !== event.type) throw new InvalidEventError(eventType, 'type must be a non-empty string');
    const data = schemas.validate(eventType, event.data);
    const eventId = event.eventId ?? randomUUID();
    if (typeof eventId !== 'string' || !isUuid(eventId)) {
      throw new InvalidEventError(eventType, `eventId must be a UUID, got ${JSON.stringify(eventId)}`);
    }
    if (seenIds.has(eventId.toLowerCase())) throw new InvalidEventError(eventType, `eventId ${eventId} appears twice in the batch`);
    seenIds.add(eventId.toLowerCase());
    const schemaVersion = event.schemaVersion ?? 1;
    if (!Number.isInteger(schemaVersion) || schemaVersion < 1) {
      throw new InvalidEventError(eventType, `schemaVersion must be an integer >= 1, got ${String(schemaVersion)}`);
    }
    const metadata: unknown = event.metadata;
    if (typeof metadata !== 'object' || metadata === null) throw new InvalidEventError(eventType, 'metadata is missing');
    const { actor, repositoryId, causationId, correlationId } = metadata as Record<string, unknown>;
    if (typeof actor !== 'string' || actor === '') throw new InvalidEventError(eventType, 'metadata.actor must be a non-empty string');
    return {
      eventId,
      type: eventType,
      schemaVersion,
      repositoryId: optionalText(repositoryId, eventType, 'repositoryId'),
      actor,
      causationId: optionalText(causationId, eventType, 'causationId'),
      correlationId: optionalText(correlationId, eventType, 'correlationId'),
      data,
    };
  });
}

/**
 * The checks of a multi-stream append (`EventStore.appendToStreams`), all before anything is
 * stored: each part as `append` checks it, a stream named once, and no event id given twice in
 * the whole call. Returns the validated events of each part, in order.
 */
export function validateStreamAppends(
  schemas: EventSchemaRegistry,
  appends: readonly { streamId: string; events: readonly NewEvent[]; expected: ExpectedVersion }[],
): ValidatedEvent[][] {
  const streams = new Set<string>();
  for (const { streamId, expected } of appends) {
    if (typeof streamId !== 'string' || streamId === '') throw new RangeError('streamId must be a non-empty string');
    if (streams.has(streamId)) throw new RangeError(`stream ${streamId} appears twice in one multi-stream append`);
    streams.add(streamId);
    checkExpectedVersion(expected);
  }
  const seenIds = new Set<string>();
  return appends.map(({ events }) => {
    const validated = validateNewEvents(schemas, events);
    for (const event of validated) {
      if (seenIds.has(event.eventId.toLowerCase())) throw new InvalidEventError(event.type, `eventId ${event.eventId} appears twice in the batch`);
      seenIds.add(event.eventId.toLowerCase());
    }
    return validated;
  });
}
