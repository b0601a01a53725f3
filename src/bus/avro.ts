import avro from 'avsc';
import type { RecordedEvent } from '../eventstore/envelope.js';
import { arrayItemsType, mapValuesType, type EventSchemaRegistry } from '../eventstore/schemas.js';
import { errorMessage } from '../util/errorMessage.js';

/**
 * The Kafka wire format of an event (docs/kafka.md):
 * - key: the stream id, so every event of a stream lands on one partition, in order;
 * - value: the Avro binary encoding of the event's `data` with its type's schema
 *   (`schemas/events/<type>.avsc`), no framing and no registry id;
 * - headers: the envelope as UTF-8 strings, plus the SHA-256 fingerprint of the writer's schema.
 *   A null envelope field (repository id of a system stream, causation, correlation) is an
 *   absent header, so a null and an empty string stay distinct.
 */
export const eventHeaders = {
  eventId: 'event-id',
  eventType: 'event-type',
  streamId: 'stream-id',
  streamVersion: 'stream-version',
  globalPosition: 'global-position',
  schemaVersion: 'schema-version',
  repositoryId: 'repository-id',
  actor: 'actor',
  causationId: 'causation-id',
  correlationId: 'correlation-id',
  occurredAt: 'occurred-at',
  schemaFingerprint: 'schema-fingerprint',
} as const;

/** A message ready for kafkajs' `producer.send`. */
export interface EncodedEvent {
  key: string;
  value: Buffer;
  headers: Record<string, string>;
}

/** A message as kafkajs hands it to a consumer (header values arrive as Buffers). */
export interface WireMessage {
  key?: Buffer | string | null;
  value: Buffer | null;
  headers?: Record<string, Buffer | string | (Buffer | string)[] | undefined>;
}

/** Why a message could not be turned back into an event: becomes the dead-letter reason. */
export type DecodeFailure = 'missing-header' | 'bad-header' | 'unknown-type' | 'fingerprint-mismatch' | 'undecodable-value';

export class EventDecodeError extends Error {
  override readonly name = 'EventDecodeError';
  constructor(
    readonly failure: DecodeFailure,
    message: string,
  ) {
    super(`${failure}: ${message}`);
  }
}

/**
 * Encodes a recorded event for Kafka. The data is validated against its schema first (the store
 * did so before append; this catches a registry that changed since) and converted from the
 * store's JSON form to Avro values (base64 strings to bytes, wrapped unions where avsc wraps).
 */
export function encodeEvent(registry: EventSchemaRegistry, event: RecordedEvent): EncodedEvent {
  const type = registry.typeFor(event.type);
  const data = registry.validate(event.type, event.data);
  const value = type.toBuffer(jsonToAvro(type, data));
  const headers: Record<string, string> = {
    [eventHeaders.eventId]: event.eventId,
    [eventHeaders.eventType]: event.type,
    [eventHeaders.streamId]: event.streamId,
    [eventHeaders.streamVersion]: String(event.streamVersion),
    [eventHeaders.globalPosition]: String(event.globalPosition),
    [eventHeaders.schemaVersion]: String(event.schemaVersion),
    [eventHeaders.actor]: event.actor,
    [eventHeaders.occurredAt]: event.occurredAt,
    [eventHeaders.schemaFingerprint]: registry.fingerprint(event.type),
  };
  if (event.repositoryId !== null) headers[eventHeaders.repositoryId] = event.repositoryId;
  if (event.causationId !== null) headers[eventHeaders.causationId] = event.causationId;
  if (event.correlationId !== null) headers[eventHeaders.correlationId] = event.correlationId;
  return { key: event.streamId, value, headers };
}

/** The event type named by a message's headers, without decoding the value; null when absent. */
export function messageEventType(message: WireMessage): string | null {
  return headerText(message, eventHeaders.eventType);
}

/**
 * Decodes a Kafka message back into the event the store recorded (data in the store's JSON
 * form, so a decoded event deep-equals the stored one). Throws EventDecodeError for a missing
 * or malformed header, an event type without a schema, a payload written with another schema
 * (fingerprint mismatch), or bytes that are not a value of the schema.
 */
export function decodeEvent(registry: EventSchemaRegistry, message: WireMessage): RecordedEvent {
  const type = requiredHeader(message, eventHeaders.eventType);
  if (!registry.has(type)) throw new EventDecodeError('unknown-type', `no schema is registered for event type ${type}`);
  const fingerprint = requiredHeader(message, eventHeaders.schemaFingerprint);
  const expected = registry.fingerprint(type);
  if (fingerprint !== expected) {
    throw new EventDecodeError(
      'fingerprint-mismatch',
      `${type} was written with schema ${fingerprint.slice(0, 16)}…, this reader has ${expected.slice(0, 16)}…`,
    );
  }
  const streamId = requiredHeader(message, eventHeaders.streamId);
  const key = message.key === undefined || message.key === null ? null : message.key.toString();
  if (key !== null && key !== streamId) {
    throw new EventDecodeError('bad-header', `key ${JSON.stringify(key)} differs from stream-id ${JSON.stringify(streamId)}`);
  }
  const envelope = {
    eventId: requiredHeader(message, eventHeaders.eventId),
    streamId,
    streamVersion: integerHeader(message, eventHeaders.streamVersion, 0),
    globalPosition: integerHeader(message, eventHeaders.globalPosition, 1),
    type,
    schemaVersion: integerHeader(message, eventHeaders.schemaVersion, 1),
    repositoryId: headerText(message, eventHeaders.repositoryId),
    actor: requiredHeader(message, eventHeaders.actor),
    causationId: headerText(message, eventHeaders.causationId),
    correlationId: headerText(message, eventHeaders.correlationId),
    occurredAt: requiredHeader(message, eventHeaders.occurredAt),
  };
  if (Number.isNaN(Date.parse(envelope.occurredAt))) {
    throw new EventDecodeError('bad-header', `occurred-at ${JSON.stringify(envelope.occurredAt)} is not a time`);
  }
  if (message.value === null) throw new EventDecodeError('undecodable-value', `${type} message has no value`);
  const avroType = registry.typeFor(type);
  let decoded: unknown;
  try {
    decoded = avroType.fromBuffer(message.value);
  } catch (error) {
    throw new EventDecodeError(
      'undecodable-value',
      `${message.value.length} bytes are not a ${type}: ${errorMessage(error)}`,
    );
  }
  return { ...envelope, data: avroToJson(avroType, decoded) as Record<string, unknown> };
}

function headerText(message: WireMessage, name: string): string | null {
  const raw = message.headers?.[name];
  if (raw === undefined) return null;
  // kafkajs gives an array when a header repeats; the envelope never repeats one.
  const value = Array.isArray(raw) ? raw[raw.length - 1] : raw;
  if (value === undefined) return null;
  return typeof value === 'string' ? value : value.toString('utf8');
}

function requiredHeader(message: WireMessage, name: string): string {
  const value = headerText(message, name);
  if (value === null || value === '') throw new EventDecodeError('missing-header', `header ${name} is missing`);
  return value;
}

function integerHeader(message: WireMessage, name: string, minimum: number): number {
  const text = requiredHeader(message, name);
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < minimum) {
    throw new EventDecodeError('bad-header', `header ${name} must be an integer >= ${minimum}, is ${JSON.stringify(text)}`);
  }
  return value;
}

/**
 * The store keeps data as JSON: bytes and fixed as base64 strings, unions as their plain value.
 * Avro wants Buffers, and a wrapped union (avsc wraps the ambiguous ones) as `{branch: value}`.
 */
function jsonToAvro(type: avro.Type, value: unknown): unknown {
  if (avro.Type.isType(type, 'logical')) return jsonToAvro((type as avro.types.LogicalType).underlyingType, value);
  switch (type.typeName) {
    case 'bytes':
    case 'fixed':
      return typeof value === 'string' ? Buffer.from(value, 'base64') : value;
    case 'array': {
      const itemsType = arrayItemsType(type);
      return Array.isArray(value) ? value.map((item) => jsonToAvro(itemsType, item)) : value;
    }
    case 'map': {
      if (!isObject(value)) return value;
      const valuesType = mapValuesType(type);
      return Object.fromEntries(Object.entries(value).map(([key, entry]) => [key, jsonToAvro(valuesType, entry)]));
    }
    case 'record':
    case 'error': {
      if (!isObject(value)) return value;
      const fields = (type as avro.types.RecordType).fields;
      return Object.fromEntries(fields.map((field) => [field.name, jsonToAvro(field.type, value[field.name])]));
    }
    case 'union:unwrapped':
    case 'union:wrapped': {
      if (value === null) return null;
      const branches = (type as avro.types.UnwrappedUnionType).types;
      for (const branch of branches) {
        if (branch.typeName === 'null') continue;
        const converted = jsonToAvro(branch, value);
        if (branch.isValid(converted)) {
          return type.typeName === 'union:wrapped' ? { [branch.branchName as string]: converted } : converted;
        }
      }
      return value; // no branch fits: toBuffer reports it
    }
    default:
      return value;
  }
}

/** The inverse of jsonToAvro: plain objects (not avsc's record classes) in the store's JSON form. */
function avroToJson(type: avro.Type, value: unknown): unknown {
  if (avro.Type.isType(type, 'logical')) return avroToJson((type as avro.types.LogicalType).underlyingType, value);
  switch (type.typeName) {
    case 'bytes':
    case 'fixed':
      return Buffer.isBuffer(value) ? value.toString('base64') : value;
    case 'array': {
      const itemsType = arrayItemsType(type);
      return Array.isArray(value) ? value.map((item) => avroToJson(itemsType, item)) : value;
    }
    case 'map': {
      if (!isObject(value)) return value;
      const valuesType = mapValuesType(type);
      return Object.fromEntries(Object.entries(value).map(([key, entry]) => [key, avroToJson(valuesType, entry)]));
    }
    case 'record':
    case 'error': {
      if (!isObject(value)) return value;
      const fields = (type as avro.types.RecordType).fields;
      return Object.fromEntries(fields.map((field) => [field.name, avroToJson(field.type, value[field.name])]));
    }
    case 'union:unwrapped': {
      if (value === null) return null;
      const branches = (type as avro.types.UnwrappedUnionType).types;
      const branch = branches.find((candidate) => candidate.typeName !== 'null' && candidate.isValid(value));
      return branch ? avroToJson(branch, value) : value;
    }
    case 'union:wrapped': {
      if (!isObject(value)) return value;
      const [branchName, inner] = Object.entries(value)[0] ?? [];
      const branch = (type as avro.types.WrappedUnionType).types.find((candidate) => candidate.branchName === branchName);
      return branch ? avroToJson(branch, inner) : inner;
    }
    default:
      return value;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !Buffer.isBuffer(value);
}
