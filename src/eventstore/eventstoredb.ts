import type { CallOptions, ClientReadableStream, Metadata } from '@grpc/grpc-js';
import {
  BACKWARDS,
  END,
  EventStoreDBClient,
  FORWARDS,
  MaxAppendSizeExceededError,
  START,
  StreamNotFoundError,
  WrongExpectedVersionError,
  convertToCommandError,
  eventTypeFilter,
  jsonEvent,
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type AppendExpectedRevision,
  type BaseOptions,
  type Direction,
  type Position,
} from '@eventstore/db-client';
// The client's own generated protocol, for the one call its public API lacks (see readAllFiltered).
import streamsPb from '@eventstore/db-client/generated/streams_pb.js';
import streamsGrpc from '@eventstore/db-client/generated/streams_grpc_pb.js';
import sharedPb from '@eventstore/db-client/generated/shared_pb.js';
import { withoutOmittedData, type NewEvent, type RecordedEvent } from './envelope.js';
import {
  AppendTooLargeError,
  ConcurrencyError,
  InvalidEventError,
  type AppendResult,
  type EventStore,
  type ExpectedVersion,
  type ReadAllOptions,
  type ReadStreamOptions,
  type ReadStreamsOptions,
  type StreamAppend,
  type StreamAppendOutcome,
  type SubscribeOptions,
  type Subscription,
} from './port.js';
import type { EventSchemaRegistry } from './schemas.js';
import { isPlainObject } from '../util/objects.js';
import { checkExpectedVersion, validateNewEvents, validateStreamAppends } from './validation.js';

/**
 * The EventStore port on EventStoreDB / KurrentDB through `@eventstore/db-client` (docs/eventstoredb.md).
 *
 * - A port stream is an EventStoreDB stream of the same name; the event type is the port's type;
 *   data is the JSON payload; the envelope fields the server has no slot for travel in the event's
 *   JSON metadata. Event ids are the port's event ids.
 * - `streamVersion` is the stream revision. `globalPosition` is the event's commit position in
 *   `$all` (equal to its prepare position for every event written through gRPC): strictly
 *   increasing along `$all`, not contiguous, and never filled in behind a reader, because the
 *   server assigns positions in commit order.
 * - System events (`$`-prefixed types, and anything in a `$`-prefixed stream) are not part of the
 *   port's log: they are filtered out on the server and, for streams, checked again here.
 */

export interface EventStoreDbStoreOptions {
  /** e.g. `esdb://localhost:2113?tls=false` */
  connectionString: string;
  schemas: EventSchemaRegistry;
  /**
   * Events the server looks at per filtered read page, and between two checkpoints of a filtered
   * subscription; default 256. Smaller finds the end of a filtered stretch sooner, larger reads faster.
   */
  searchWindow?: number;
}

/** The envelope fields the server has no place for, as stored in each event's JSON metadata. */
interface StoredEnvelope {
  repositoryId: string | null;
  actor: string;
  causationId: string | null;
  correlationId: string | null;
  schemaVersion: number;
  /** EventStoreDB's own conventions, so its `$by_correlation_id` projection works on our events. */
  $correlationId?: string;
  $causationId?: string;
}

/** What the adapter needs of an event the server returned, from the client or from a raw read. */
interface ServerEvent {
  id: string;
  streamId: string;
  revision: bigint;
  type: string;
  created: Date;
  isJson: boolean;
  data: unknown;
  metadata: unknown;
  position?: Position;
}

const defaultReadLimit = 1000;
const defaultBatchSize = 500;
const defaultSearchWindow = 256;
/** Event types of user events: everything not `$`-prefixed. */
const nonSystemTypePattern = '^[^$]';
/** A real server answers -1 as `Position.End` (2^64 - 1) for an event without a known position. */
const unknownPositionFloor = 1n << 63n;

interface AppendDocument {
  eventId: string;
  type: string;
  data: Record<string, unknown>;
  envelope: StoredEnvelope;
}

function toExpectedRevision(expected: ExpectedVersion): AppendExpectedRevision {
  if (typeof expected === 'number') return BigInt(expected);
  return expected; // 'no_stream' | 'stream_exists' | 'any' are the client's own constants
}

/** The shared checks, plus the EventStoreDB envelope in metadata. */
function toAppendDocuments(schemas: EventSchemaRegistry, events: readonly NewEvent[]): AppendDocument[] {
  return validateNewEvents(schemas, events).map(({ eventId, type, data, schemaVersion, repositoryId, actor, causationId, correlationId }) => {
    const envelope: StoredEnvelope = { repositoryId, actor, causationId, correlationId, schemaVersion };
    if (correlationId !== null) envelope.$correlationId = correlationId;
    if (causationId !== null) envelope.$causationId = causationId;
    // PostgreSQL (jsonb and text) cannot hold U+0000: refuse it here too, or the log could not be copied there.
    if (JSON.stringify([data, envelope]).includes('\\u0000')) {
      throw new InvalidEventError(type, 'a string contains a character PostgreSQL cannot store (\\u0000)');
    }
    return { eventId: eventId.toLowerCase(), type, data, envelope };
  });
}

/**
 * An append's size as the server counts it against its `MaxAppendSize` (Core `Event.SizeOnDisk`,
 * summed over the events): each event's data and metadata in bytes (the JSON the client sends)
 * plus two bytes per UTF-16 unit of its type.
 */
function appendSizeOf(documents: readonly AppendDocument[]): number {
  return documents.reduce(
    (sum, document) =>
      sum + Buffer.byteLength(JSON.stringify(document.data)) + Buffer.byteLength(JSON.stringify(document.envelope)) + document.type.length * 2,
    0,
  );
}

function textOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** The port's one number for an event's place in `$all`. */
function globalPositionOf(event: ServerEvent): number {
  const position = event.position;
  if (!position || position.commit >= unknownPositionFloor) {
    throw new Error(`event ${event.id} of ${event.streamId}: the server did not report its position in $all`);
  }
  if (position.commit !== position.prepare) {
    // Only the legacy TCP API's explicit transactions write these; one number cannot order them.
    throw new Error(
      `event ${event.id} of ${event.streamId} was written in an explicit transaction (commit ${position.commit}, prepare ${position.prepare}); the port cannot address it`,
    );
  }
  const value = Number(position.commit);
  if (!Number.isSafeInteger(value)) throw new Error(`event ${event.id}: position ${position.commit} is beyond 2^53`);
  return value;
}

function toRecordedEvent(event: ServerEvent): RecordedEvent {
  // Events written by other tools lack our envelope: read them with neutral defaults rather than fail.
  const envelope = isPlainObject(event.metadata) ? event.metadata : {};
  const schemaVersion = envelope.schemaVersion;
  return {
    eventId: event.id,
    streamId: event.streamId,
    streamVersion: Number(event.revision),
    globalPosition: globalPositionOf(event),
    type: event.type,
    schemaVersion: typeof schemaVersion === 'number' && Number.isInteger(schemaVersion) ? schemaVersion : 1,
    repositoryId: textOrNull(envelope.repositoryId),
    actor: textOrNull(envelope.actor) ?? 'unknown',
    causationId: textOrNull(envelope.causationId),
    correlationId: textOrNull(envelope.correlationId),
    data: event.isJson && isPlainObject(event.data) ? event.data : {},
    occurredAt: event.created.toISOString(),
  };
}

function isSystemEvent(event: { type: string; streamId: string }): boolean {
  return event.type.startsWith('$') || event.streamId.startsWith('$');
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function exactlyOneOf(values: readonly string[]): string {
  return `^(?:${values.map(escapeRegex).join('|')})$`;
}

function toPosition(globalPosition: number): Position {
  return { commit: BigInt(globalPosition), prepare: BigInt(globalPosition) };
}

/**
 * The client's machinery for raw calls. Protected in its typings; its own `readAll` is built from
 * exactly these two members, and the client version is pinned.
 */
interface ClientCallMachinery {
  GRPCStreamCreator<T>(
    Client: typeof streamsGrpc.StreamsClient,
    debugName: string,
    creator: (client: InstanceType<typeof streamsGrpc.StreamsClient>) => T,
  ): () => Promise<T>;
  callArguments(options: BaseOptions, callOptions?: CallOptions): [Metadata, CallOptions];
}

type ReadResponse = InstanceType<typeof streamsPb.ReadResp>;

interface FilteredReadOptions {
  from: 'start' | 'end' | Position;
  direction: Direction;
  maxCount: number;
  filterOn: 'eventType' | 'streamName';
  regex: string;
  searchWindow: number;
}

/**
 * A read of `$all` with a server-side filter. The server has always supported it (subscriptions
 * use it); client 6.x only exposes it on subscriptions, so the request is built here from the
 * client's generated messages, as its own readAll builds the unfiltered one.
 */
async function readAllFiltered(client: EventStoreDBClient, options: FilteredReadOptions): Promise<ServerEvent[]> {
  const { ReadReq } = streamsPb;
  const request = new ReadReq();
  const readOptions = new ReadReq.Options();
  const allOptions = new ReadReq.Options.AllOptions();
  if (options.from === 'start') allOptions.setStart(new sharedPb.Empty());
  else if (options.from === 'end') allOptions.setEnd(new sharedPb.Empty());
  else {
    const position = new ReadReq.Options.Position();
    position.setCommitPosition(options.from.commit.toString());
    position.setPreparePosition(options.from.prepare.toString());
    allOptions.setPosition(position);
  }
  readOptions.setAll(allOptions);
  readOptions.setResolveLinks(false);
  readOptions.setCount(String(options.maxCount));
  readOptions.setReadDirection(options.direction === BACKWARDS ? ReadReq.Options.ReadDirection.BACKWARDS : ReadReq.Options.ReadDirection.FORWARDS);
  const uuidOption = new ReadReq.Options.UUIDOption();
  uuidOption.setString(new sharedPb.Empty());
  readOptions.setUuidOption(uuidOption);
  const expression = new ReadReq.Options.FilterOptions.Expression();
  expression.setRegex(options.regex);
  const filter = new ReadReq.Options.FilterOptions();
  if (options.filterOn === 'eventType') filter.setEventType(expression);
  else filter.setStreamIdentifier(expression);
  filter.setMax(options.searchWindow);
  filter.setCheckpointintervalmultiplier(1);
  readOptions.setFilter(filter);
  request.setOptions(readOptions);

  // The members are protected in the client's typings (ClientCallMachinery, above): no other way to reach them.
  const machinery = client as unknown as ClientCallMachinery;
  const events: ServerEvent[] = [];
  try {
    const call = await machinery.GRPCStreamCreator(streamsGrpc.StreamsClient, 'readAllFiltered', (grpcClient) =>
      grpcClient.read(request, ...machinery.callArguments({}, { deadline: Infinity })),
    )();
    for await (const response of call as ClientReadableStream<ReadResponse>) {
      const recorded = response.getEvent()?.getEvent();
      if (recorded) events.push(fromProtocolEvent(recorded));
    }
  } catch (error) {
    throw error instanceof Error ? convertToCommandError(error) : error;
  }
  return events;
}

/** As the client converts a read event (utils/convertGrpcEvent), for the raw read above. */
function fromProtocolEvent(recorded: InstanceType<typeof streamsPb.ReadResp.ReadEvent.RecordedEvent>): ServerEvent {
  const metadataMap = recorded.getMetadataMap();
  const isJson = metadataMap.get('content-type') === 'application/json';
  const dataText = Buffer.from(recorded.getData_asU8()).toString('utf8');
  const metadataBytes = recorded.getCustomMetadata_asU8();
  const created = metadataMap.get('created');
  return {
    id: recorded.getId()?.getString() ?? '',
    streamId: Buffer.from(recorded.getStreamIdentifier()?.getStreamName_asU8() ?? new Uint8Array()).toString('utf8'),
    revision: BigInt(recorded.getStreamRevision()),
    type: metadataMap.get('type') ?? '',
    // `created` is in .NET ticks (100 ns) since the Unix epoch.
    created: new Date(created ? Number(BigInt(created) / 10_000n) : 0),
    isJson,
    data: isJson ? parseJsonOr(dataText, dataText) : recorded.getData_asU8(),
    metadata: metadataBytes.length > 0 ? parseJsonOr(Buffer.from(metadataBytes).toString('utf8'), metadataBytes) : undefined,
    position: { commit: BigInt(recorded.getCommitPosition()), prepare: BigInt(recorded.getPreparePosition()) },
  };
}

function parseJsonOr(text: string, fallback: unknown): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return fallback;
  }
}

function checkReadAllOptions(options: ReadAllOptions): { limit: number; after: number } {
  const limit = options.limit ?? defaultReadLimit;
  if (!Number.isInteger(limit) || limit < 0) throw new RangeError(`limit must be an integer >= 0, got ${String(limit)}`);
  const after = options.after ?? 0;
  if (!Number.isInteger(after) || after < 0) throw new RangeError(`after must be an integer >= 0, got ${String(after)}`);
  return { limit, after };
}

/** Whether the port's log holds this event under the read's filters (what the server could not filter). */
function matchesReadFilters(event: RecordedEvent, options: ReadAllOptions): boolean {
  if (isSystemEvent(event)) return false;
  if (options.types !== undefined && !options.types.includes(event.type)) return false;
  if (options.repositoryId !== undefined && event.repositoryId !== options.repositoryId) return false;
  if (options.streamId !== undefined && event.streamId !== options.streamId) return false;
  return true;
}

export function createEventStoreDbStore(options: EventStoreDbStoreOptions): EventStore {
  const client = EventStoreDBClient.connectionString(options.connectionString);
  const searchWindow = options.searchWindow ?? defaultSearchWindow;
  if (!Number.isInteger(searchWindow) || searchWindow < 1) throw new RangeError('searchWindow must be an integer >= 1');
  const subscriptions = new Set<EventStoreDbSubscription>();

  async function readStreamEvents(
    streamId: string,
    fromRevision: bigint | 'start' | 'end',
    maxCount: number,
    direction: Direction = FORWARDS,
  ): Promise<ServerEvent[]> {
    const events: ServerEvent[] = [];
    try {
      for await (const resolved of client.readStream(streamId, {
        fromRevision: fromRevision === 'start' ? START : fromRevision === 'end' ? END : fromRevision,
        maxCount,
        direction,
      })) {
        if (resolved.event) events.push(resolved.event);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
    return events;
  }

  async function currentVersion(streamId: string): Promise<number | 'no_stream'> {
    const [last] = await readStreamEvents(streamId, 'end', 1, BACKWARDS);
    return last ? Number(last.revision) : 'no_stream';
  }

  /** Events of the port's log after `after`, filtered as asked, at most `limit`. */
  async function readLog(readOptions: ReadAllOptions): Promise<RecordedEvent[]> {
    const { limit, after } = checkReadAllOptions(readOptions);
    if (limit === 0 || (readOptions.types !== undefined && readOptions.types.length === 0)) return [];
    // The server filters on one thing: the stream when one is asked for, else the event types.
    const serverFilter: Pick<FilteredReadOptions, 'filterOn' | 'regex'> =
      readOptions.streamId !== undefined
        ? { filterOn: 'streamName', regex: exactlyOneOf([readOptions.streamId]) }
        : { filterOn: 'eventType', regex: readOptions.types !== undefined ? exactlyOneOf(readOptions.types) : nonSystemTypePattern };
    const filteredHere = readOptions.repositoryId !== undefined || (readOptions.streamId !== undefined && readOptions.types !== undefined);
    const pageSize = filteredHere ? Math.max(limit, searchWindow) : limit;
    const found: RecordedEvent[] = [];
    let position = after;
    for (;;) {
      // Reading forwards from a position includes the event there: it is the one we already have.
      const page = await readAllFiltered(client, {
        from: position === 0 ? 'start' : toPosition(position),
        direction: FORWARDS,
        maxCount: pageSize + (position === 0 ? 0 : 1),
        searchWindow,
        ...serverFilter,
      });
      const fresh = page.filter((event) => globalPositionOf(event) > position);
      for (const event of fresh) {
        const recorded = toRecordedEvent(event);
        if (matchesReadFilters(recorded, readOptions)) found.push(recorded);
        if (found.length === limit) return found;
      }
      if (fresh.length < pageSize) return found;
      position = globalPositionOf(fresh[fresh.length - 1]);
    }
  }

  async function headPosition(): Promise<number> {
    let from: 'end' | Position = 'end';
    for (;;) {
      const page = await readAllFiltered(client, {
        from,
        direction: BACKWARDS,
        maxCount: 32,
        searchWindow,
        filterOn: 'eventType',
        regex: nonSystemTypePattern,
      });
      const last = page.find((event) => !isSystemEvent(event));
      if (last) return globalPositionOf(last);
      if (page.length < 32) return 0;
      // A backwards read starts before its position.
      from = page[page.length - 1].position ?? 'end';
    }
  }

  const store: EventStore = {
    async append(streamId, events, expected): Promise<AppendResult> {
      if (typeof streamId !== 'string' || streamId === '') throw new RangeError('streamId must be a non-empty string');
      checkExpectedVersion(expected);
      const documents = toAppendDocuments(options.schemas, events);
      if (documents.length === 0) {
        // An empty append only checks the version (the server would answer with a bare revision).
        const current = await currentVersion(streamId);
        const holds =
          expected === 'any' ||
          (expected === 'no_stream' && current === 'no_stream') ||
          (expected === 'stream_exists' && current !== 'no_stream') ||
          expected === current;
        if (!holds) throw new ConcurrencyError(streamId, expected, current);
        return { nextExpectedVersion: current === 'no_stream' ? -1 : current, lastPosition: 0, events: [] };
      }
      let appended;
      try {
        appended = await client.appendToStream(
          streamId,
          documents.map((document) =>
            jsonEvent({ id: document.eventId, type: document.type, data: document.data, metadata: { ...document.envelope } }),
          ),
          { expectedRevision: toExpectedRevision(expected) },
        );
      } catch (error) {
        if (error instanceof WrongExpectedVersionError) {
          const actual = error.actualVersion === 'no_stream' ? 'no_stream' : Number(error.actualVersion);
          throw new ConcurrencyError(streamId, expected, actual);
        }
        // The same append is refused every time: a permanent error naming size and limit, not one to retry.
        if (error instanceof MaxAppendSizeExceededError) throw new AppendTooLargeError(streamId, appendSizeOf(documents), error.maxAppendSize);
        throw error;
      }
      if (appended.position === undefined) {
        // The server recognised the event ids of an earlier identical write and stored nothing:
        // as on the PostgreSQL store, a retry has lost the race to its own first attempt.
        throw new ConcurrencyError(streamId, expected, await currentVersion(streamId));
      }
      const lastVersion = Number(appended.nextExpectedRevision);
      const firstVersion = lastVersion - documents.length + 1;
      // The append answer carries the last revision only: read the batch back for each event's position and time.
      const stored = await readStreamEvents(streamId, BigInt(firstVersion), documents.length);
      const recorded = stored.map(toRecordedEvent);
      if (recorded.length !== documents.length || recorded.some((event, index) => event.eventId !== documents[index].eventId)) {
        throw new Error(`stream ${streamId}: the events read back at ${firstVersion}..${lastVersion} are not the ones appended`);
      }
      for (const subscription of subscriptions) subscription.noteAppend();
      return { nextExpectedVersion: lastVersion, lastPosition: recorded[recorded.length - 1].globalPosition, events: recorded };
    },

    async readStream(streamId: string, readOptions: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
      const fromVersion = readOptions.fromVersion ?? 0;
      if (!Number.isInteger(fromVersion) || fromVersion < 0) throw new RangeError('fromVersion must be an integer >= 0');
      const limit = readOptions.limit;
      if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) throw new RangeError('limit must be an integer >= 0');
      if (limit === 0) return [];
      const events = await readStreamEvents(streamId, BigInt(fromVersion), limit ?? Number.MAX_SAFE_INTEGER);
      return events.map(toRecordedEvent);
    },

    // The protocol has no multi-stream read or append: one call per stream, with the port's semantics.
    async readStreams(streamIds: readonly string[], readOptions: ReadStreamsOptions = {}): Promise<Map<string, RecordedEvent[]>> {
      const byStream = new Map<string, RecordedEvent[]>();
      for (const streamId of streamIds) {
        if (typeof streamId !== 'string') throw new RangeError('stream ids must be strings');
        if (!byStream.has(streamId)) {
          const after = readOptions.after?.[streamId];
          const events = await readStreamEvents(streamId, after === undefined ? 'start' : BigInt(after + 1), Number.MAX_SAFE_INTEGER);
          byStream.set(streamId, events.map((event) => withoutOmittedData(toRecordedEvent(event), readOptions.omitData)));
        }
      }
      return byStream;
    },

    async appendToStreams(appends: readonly StreamAppend[]): Promise<StreamAppendOutcome[]> {
      // Everything is checked before the first part is written, as one statement would.
      validateStreamAppends(options.schemas, appends);
      for (const part of appends) toAppendDocuments(options.schemas, part.events);
      const outcomes: StreamAppendOutcome[] = [];
      for (const part of appends) {
        try {
          outcomes.push({ streamId: part.streamId, result: await store.append(part.streamId, part.events, part.expected) });
        } catch (error) {
          if (!(error instanceof ConcurrencyError)) throw error;
          outcomes.push({ streamId: part.streamId, conflict: error });
        }
      }
      return outcomes;
    },

    readAll: (readOptions: ReadAllOptions = {}) => readLog(readOptions),

    headPosition,

    subscribe(subscribeOptions: SubscribeOptions): Subscription {
      const subscription = new EventStoreDbSubscription(client, subscribeOptions, searchWindow, {
        headPosition,
        hasUndelivered: async (after, upTo, types) => {
          const next = await readLog({ after, limit: 1, types });
          return next.length > 0 && next[0].globalPosition <= upTo;
        },
        finished: () => subscriptions.delete(subscription),
      });
      subscriptions.add(subscription);
      subscription.start();
      return subscription;
    },

    async close() {
      await Promise.all([...subscriptions].map((subscription) => subscription.stop()));
      await client.dispose();
    },
  };
  return store;
}

interface SubscriptionHelpers {
  headPosition(): Promise<number>;
  /** Whether the log holds an event the subscription would deliver in (after, upTo]. */
  hasUndelivered(after: number, upTo: number, types: readonly string[] | undefined): Promise<boolean>;
  finished(): void;
}

interface QueuedEvent {
  position: number;
  /** null for an event the subscription only passes over (a system event, or another type). */
  recorded: RecordedEvent | null;
}

/**
 * A catch-up subscription to `$all`, filtered on the server (system events, and the port's types)
 * with checkpoints, so its position keeps moving through long stretches it does not deliver.
 * Events are queued as the server sends them and handed to the handler in batches, one at a time.
 */
export class EventStoreDbSubscription implements Subscription {
  /** Last position handed to the handler (always an event's position, or the start). */
  private delivered: number;
  /** Every position up to here has been passed: delivered, or filtered out before a checkpoint. */
  private scanned: number;
  private running = true;
  private failure: Error | null = null;
  private readonly queue: QueuedEvent[] = [];
  private processing: Promise<void> | null = null;
  private serverSubscription: AllStreamSubscription | null = null;
  private progressListeners: Array<() => void> = [];
  private readonly batchSize: number;

  constructor(
    private readonly client: EventStoreDBClient,
    private readonly options: SubscribeOptions,
    private readonly searchWindow: number,
    private readonly helpers: SubscriptionHelpers,
  ) {
    if (!Number.isInteger(options.after) || options.after < 0) throw new RangeError('after must be an integer >= 0');
    this.batchSize = options.batchSize ?? defaultBatchSize;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1) throw new RangeError('batchSize must be an integer >= 1');
    this.delivered = options.after;
    this.scanned = options.after;
  }

  /** Every position up to this one has been passed (delivered, or skipped by the filters): for lag monitoring. */
  get scannedPosition(): number {
    return this.scanned;
  }

  start(): void {
    const { types, after } = this.options;
    const serverSubscription = this.client.subscribeToAll({
      fromPosition: after === 0 ? START : toPosition(after),
      filter: eventTypeFilter({
        regex: types !== undefined ? (types.length === 0 ? '^$' : exactlyOneOf(types)) : nonSystemTypePattern,
        maxSearchWindow: this.searchWindow,
        checkpointInterval: 1,
        checkpointReached: (_subscription, position) => this.onCheckpoint(position),
      }),
    });
    this.serverSubscription = serverSubscription;
    serverSubscription.on('data', (resolved: AllStreamResolvedEvent) => this.onServerEvent(resolved));
    serverSubscription.on('error', (error: unknown) => this.fail(error));
    serverSubscription.on('end', () => {
      if (this.running) this.fail(new Error('the server ended the subscription'));
    });
  }

  /** An append through this store: nothing to do (the server pushes), but caughtUp waiters may re-check. */
  noteAppend(): void {
    this.notifyProgress();
  }

  async stop(): Promise<void> {
    if (this.running) {
      this.running = false;
      await this.serverSubscription?.unsubscribe();
      this.queue.length = 0;
    }
    await this.processing;
    this.notifyProgress();
    this.helpers.finished();
  }

  async caughtUp(): Promise<void> {
    const target = await this.helpers.headPosition();
    for (;;) {
      if (this.scanned >= target) return;
      // A filtered tail with no checkpoint yet: caught up if nothing deliverable lies between.
      const progressed = this.nextProgress();
      if (this.queue.length === 0 && !this.processing && !(await this.helpers.hasUndelivered(this.delivered, target, this.options.types))) {
        return;
      }
      if (!this.running) throw this.failure ?? new Error('subscription stopped before catching up');
      await Promise.race([progressed, new Promise((resolve) => setTimeout(resolve, 250))]);
    }
  }

  private nextProgress(): Promise<void> {
    return new Promise<void>((resolve) => this.progressListeners.push(resolve));
  }

  private notifyProgress(): void {
    const listeners = this.progressListeners;
    this.progressListeners = [];
    for (const listener of listeners) listener();
  }

  private onServerEvent(resolved: AllStreamResolvedEvent): void {
    if (!this.running) return;
    const event = resolved.event;
    if (!event) return;
    try {
      const position = globalPositionOf(event);
      // A server that starts a subscription at (not after) its position would repeat this one.
      if (position <= this.options.after) return;
      const recorded = isSystemEvent(event) ? null : toRecordedEvent(event);
      const wanted = recorded !== null && (this.options.types === undefined || this.options.types.includes(recorded.type));
      this.queue.push({ position, recorded: wanted ? recorded : null });
    } catch (error) {
      this.fail(error);
      return;
    }
    // Hold the server back while the handler is behind.
    if (this.queue.length >= 2 * this.batchSize) this.serverSubscription?.pause();
    this.kick();
  }

  /** Checkpoints arrive in order after the events before them: pass it once those are handled. */
  private async onCheckpoint(position: Position): Promise<void> {
    while (this.running && (this.queue.length > 0 || this.processing || (this.serverSubscription?.readableLength ?? 0) > 0)) {
      await (this.processing ?? new Promise((resolve) => setImmediate(resolve)));
    }
    if (!this.running) return;
    this.scanned = Math.max(this.scanned, Number(position.commit));
    this.notifyProgress();
  }

  private kick(): void {
    if (this.processing || !this.running) return;
    this.processing = this.processQueue().finally(() => {
      this.processing = null;
      if (this.queue.length > 0) this.kick();
      this.notifyProgress();
    });
  }

  private async processQueue(): Promise<void> {
    while (this.running && this.queue.length > 0) {
      const batch: RecordedEvent[] = [];
      let passed = this.scanned;
      while (this.queue.length > 0 && batch.length < this.batchSize) {
        const item = this.queue.shift()!;
        passed = item.position;
        if (item.recorded) batch.push(item.recorded);
      }
      if (batch.length > 0) {
        try {
          await this.options.handler(batch);
        } catch (error) {
          this.fail(error);
          return;
        }
        if (!this.running) return;
        this.delivered = batch[batch.length - 1].globalPosition;
      }
      this.scanned = Math.max(this.scanned, passed);
      if (this.queue.length < this.batchSize) this.serverSubscription?.resume();
      this.notifyProgress();
    }
  }

  private fail(error: unknown): void {
    if (!this.running) return;
    this.failure = error instanceof Error ? error : new Error(String(error));
    this.running = false;
    this.queue.length = 0;
    void this.serverSubscription?.unsubscribe();
    if (this.options.onError) this.options.onError(error);
    else process.emitWarning(`event subscription stopped: ${this.failure.message}`);
    this.notifyProgress();
    this.helpers.finished();
  }
}
