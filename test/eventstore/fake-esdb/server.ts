import { randomUUID } from 'node:crypto';
import {
  Metadata,
  Server,
  ServerCredentials,
  status as grpcStatus,
  type ServerDuplexStream,
  type ServerReadableStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
} from '@grpc/grpc-js';
import anyPb from 'google-protobuf/google/protobuf/any_pb.js';
import emptyPb from 'google-protobuf/google/protobuf/empty_pb.js';
// The client's own generated protocol: the fake answers exactly the messages the client sends.
import streamsPb from '@eventstore/db-client/generated/streams_pb.js';
import streamsGrpc from '@eventstore/db-client/generated/streams_grpc_pb.js';
import sharedPb from '@eventstore/db-client/generated/shared_pb.js';
import statusPb from '@eventstore/db-client/generated/status_pb.js';
import codePb from '@eventstore/db-client/generated/code_pb.js';
import featuresPb from '@eventstore/db-client/generated/serverfeatures_pb.js';
import featuresGrpc from '@eventstore/db-client/generated/serverfeatures_grpc_pb.js';
import { FakeTransactionLog, type AppendOutcome, type ExpectedRevision, type LoggedEvent, type ProposedEvent } from './log.js';

const { ReadReq, ReadResp, AppendResp, BatchAppendResp } = streamsPb;
type ReadReqMessage = InstanceType<typeof ReadReq>;
type ReadRespMessage = InstanceType<typeof ReadResp>;
type FilterOptionsMessage = InstanceType<typeof ReadReq.Options.FilterOptions>;
type AppendReqMessage = InstanceType<typeof streamsPb.AppendReq>;
type AppendRespMessage = InstanceType<typeof AppendResp>;
type BatchAppendReqMessage = InstanceType<typeof streamsPb.BatchAppendReq>;
type BatchAppendRespMessage = InstanceType<typeof BatchAppendResp>;
type ProposedMessage = InstanceType<typeof streamsPb.AppendReq.ProposedMessage> | InstanceType<typeof streamsPb.BatchAppendReq.ProposedMessage>;

export interface FakeEventStoreDbOptions {
  /** Advertise and serve BatchAppend (as every server since 21.10 does); default true. Off, the client uses Append. */
  batchAppend?: boolean;
  /**
   * The server's `MaxAppendSize` in bytes: an append whose events measure more together
   * (appendSizeOf) is refused, as a real server refuses it. Default 1,048,576, a real server's default.
   */
  maxAppendSize?: number;
}

/** A real server's default `MaxAppendSize` (1 MiB; configurable up to 16 MiB). */
export const DEFAULT_MAX_APPEND_SIZE = 1_048_576;

/**
 * An event's size as a real server counts it against `MaxAppendSize` (Core `Event.SizeOnDisk`):
 * its data and custom metadata in bytes plus two bytes per UTF-16 unit of its type. An append's
 * size is the sum over its events, checked as each event arrives.
 */
export function eventSizeOnDisk(event: Pick<ProposedEvent, 'type' | 'data' | 'customMetadata'>): number {
  return event.data.length + event.customMetadata.length + event.type.length * 2;
}

export interface FakeEventStoreDb {
  /** `esdb://127.0.0.1:<port>?tls=false` */
  readonly connectionString: string;
  readonly log: FakeTransactionLog;
  close(): Promise<void>;
}

/** Default filter search window of the server (ReadBatchSize). */
const defaultSearchWindow = 32;

/**
 * A gRPC server speaking EventStoreDB's Streams and ServerFeatures protocol from the client's own
 * generated definitions, on a random local port. It implements what the factlog adapter uses:
 * Append and BatchAppend with expected revisions and idempotent retries, Read of a stream, Read of
 * `$all` forwards and backwards from a position with a count and a server-side filter, and catch-up
 * subscriptions to `$all` with filters, checkpoints and the caught-up notice. It starts, as a real
 * server does, with a few system events in `$all`.
 */
export async function startFakeEventStoreDb(options: FakeEventStoreDbOptions = {}): Promise<FakeEventStoreDb> {
  const batchAppend = options.batchAppend ?? true;
  const maxAppendSize = options.maxAppendSize ?? DEFAULT_MAX_APPEND_SIZE;
  if (!Number.isInteger(maxAppendSize) || maxAppendSize < 1) throw new RangeError('maxAppendSize must be a positive integer');
  const log = new FakeTransactionLog();
  const systemEvent = (type: string): ProposedEvent => ({
    id: randomUUID(),
    type,
    contentType: 'application/json',
    data: Buffer.from('{}'),
    customMetadata: new Uint8Array(),
  });
  log.append('$settings', { kind: 'any' }, [systemEvent('$settings')]);
  log.append('$scavenges', { kind: 'any' }, [systemEvent('$scavengeIndexInitialized')]);

  const server = new Server();
  const liveSubscriptions = new Set<() => void>();
  server.addService(featuresGrpc.ServerFeaturesService, {
    getSupportedMethods(_call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<InstanceType<typeof featuresPb.SupportedMethods>>) {
      const supported = new featuresPb.SupportedMethods();
      supported.setEventStoreServerVersion('24.10.0-fake');
      const methods = ['Read', 'Append', ...(batchAppend ? ['BatchAppend'] : [])].map((name) => {
        const method = new featuresPb.SupportedMethod();
        method.setServiceName('event_store.client.streams.Streams');
        method.setMethodName(name);
        return method;
      });
      supported.setMethodsList(methods);
      callback(null, supported);
    },
  });
  server.addService(streamsGrpc.StreamsService, {
    read: (call: ServerWritableStream<ReadReqMessage, ReadRespMessage>) => serveRead(log, call, liveSubscriptions),
    append: (call: ServerReadableStream<AppendReqMessage, AppendRespMessage>, callback: sendUnaryData<AppendRespMessage>) =>
      serveAppend(log, maxAppendSize, call, callback),
    batchAppend: (call: ServerDuplexStream<BatchAppendReqMessage, BatchAppendRespMessage>) => {
      if (!batchAppend) {
        call.emit('error', { code: grpcStatus.UNIMPLEMENTED, details: 'BatchAppend is switched off on this fake server' });
        return;
      }
      serveBatchAppend(log, maxAppendSize, call);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, boundPort) =>
      error ? reject(error) : resolve(boundPort),
    ),
  );
  return {
    connectionString: `esdb://127.0.0.1:${port}?tls=false`,
    log,
    close: async () => {
      for (const unsubscribe of liveSubscriptions) unsubscribe();
      server.forceShutdown();
    },
  };
}

function streamNameOf(identifier: InstanceType<typeof sharedPb.StreamIdentifier> | undefined): string {
  return Buffer.from(identifier?.getStreamName_asU8() ?? new Uint8Array()).toString('utf8');
}

function toProposedEvent(message: ProposedMessage): ProposedEvent {
  const metadata = message.getMetadataMap();
  return {
    id: message.getId()?.getString() ?? randomUUID(),
    type: metadata.get('type') ?? '',
    contentType: metadata.get('content-type') ?? 'application/octet-stream',
    data: message.getData_asU8(),
    customMetadata: message.getCustomMetadata_asU8(),
  };
}

function toReadEvent(event: LoggedEvent): InstanceType<typeof ReadResp.ReadEvent> {
  const recorded = new ReadResp.ReadEvent.RecordedEvent();
  const id = new sharedPb.UUID();
  id.setString(event.id);
  recorded.setId(id);
  const identifier = new sharedPb.StreamIdentifier();
  identifier.setStreamName(Buffer.from(event.streamName, 'utf8'));
  recorded.setStreamIdentifier(identifier);
  recorded.setStreamRevision(event.revision.toString());
  recorded.setCommitPosition(event.position.toString());
  recorded.setPreparePosition(event.position.toString());
  recorded.getMetadataMap().set('type', event.type);
  recorded.getMetadataMap().set('content-type', event.contentType);
  recorded.getMetadataMap().set('created', event.createdTicks.toString());
  recorded.setData(event.data);
  recorded.setCustomMetadata(event.customMetadata);
  const readEvent = new ReadResp.ReadEvent();
  readEvent.setEvent(recorded);
  readEvent.setCommitPosition(event.position.toString());
  return readEvent;
}

function eventResponse(event: LoggedEvent): ReadRespMessage {
  const response = new ReadResp();
  response.setEvent(toReadEvent(event));
  return response;
}

function checkpointResponse(position: bigint): ReadRespMessage {
  const checkpoint = new ReadResp.Checkpoint();
  checkpoint.setCommitPosition(position.toString());
  checkpoint.setPreparePosition(position.toString());
  const response = new ReadResp();
  response.setCheckpoint(checkpoint);
  return response;
}

/** The server's event filter: a regex or a prefix list, on the event type or the stream name. */
function compileFilter(filter: FilterOptionsMessage | undefined): ((event: LoggedEvent) => boolean) | null {
  if (!filter) return null;
  const onType = filter.hasEventType();
  const expression = onType ? filter.getEventType() : filter.getStreamIdentifier();
  const regex = expression?.getRegex() ?? '';
  const prefixes = expression?.getPrefixList() ?? [];
  const pattern = regex !== '' ? new RegExp(regex) : null;
  return (event) => {
    const subject = onType ? event.type : event.streamName;
    return pattern ? pattern.test(subject) : prefixes.some((prefix) => subject.startsWith(prefix));
  };
}

function failCall(call: ServerWritableStream<ReadReqMessage, ReadRespMessage>, code: grpcStatus, details: string): void {
  call.emit('error', { code, details });
}

function serveRead(
  log: FakeTransactionLog,
  call: ServerWritableStream<ReadReqMessage, ReadRespMessage>,
  liveSubscriptions: Set<() => void>,
): void {
  const options = call.request.getOptions();
  if (!options) return failCall(call, grpcStatus.INVALID_ARGUMENT, 'options are required');
  if (options.getUuidOption()?.hasStructured()) {
    return failCall(call, grpcStatus.UNIMPLEMENTED, 'the fake server sends UUIDs as strings only');
  }
  const backwards = options.getReadDirection() === ReadReq.Options.ReadDirection.BACKWARDS;
  const count = options.hasCount() ? BigInt(options.getCount()) : null;

  if (options.hasStream()) {
    if (options.hasSubscription()) return failCall(call, grpcStatus.UNIMPLEMENTED, 'stream subscriptions are not implemented');
    const streamOptions = options.getStream()!;
    const streamName = streamNameOf(streamOptions.getStreamIdentifier());
    const stream = log.stream(streamName);
    if (!stream) {
      const notFound = new ReadResp.StreamNotFound();
      notFound.setStreamIdentifier(streamOptions.getStreamIdentifier());
      const response = new ReadResp();
      response.setStreamNotFound(notFound);
      call.write(response);
      call.end();
      return;
    }
    let selected: LoggedEvent[];
    if (!backwards) {
      const from = streamOptions.hasRevision() ? Number(streamOptions.getRevision()) : streamOptions.hasEnd() ? stream.length : 0;
      selected = stream.slice(from);
    } else {
      const from = streamOptions.hasRevision() ? Number(streamOptions.getRevision()) : stream.length - 1;
      selected = stream.slice(0, Math.max(0, from + 1)).reverse();
    }
    for (const event of count === null ? selected : selected.slice(0, Number(count))) call.write(eventResponse(event));
    call.end();
    return;
  }

  const allOptions = options.getAll();
  if (!allOptions) return failCall(call, grpcStatus.INVALID_ARGUMENT, 'a stream or $all is required');
  const filter = compileFilter(options.hasFilter() ? options.getFilter() : undefined);
  const position = allOptions.hasPosition()
    ? { commit: BigInt(allOptions.getPosition()!.getCommitPosition()), prepare: BigInt(allOptions.getPosition()!.getPreparePosition()) }
    : null;

  if (options.hasSubscription()) {
    subscribeToAll(log, call, liveSubscriptions, {
      filter,
      filterOptions: options.hasFilter() ? options.getFilter() : undefined,
      // A subscription starts after its position (exclusive); at End it only follows new appends.
      startIndex: allOptions.hasEnd() ? log.events.length : position === null ? 0 : firstIndexAfter(log, position),
    });
    return;
  }

  // A forwards read includes the event at its position; a backwards read starts before it.
  let selected: LoggedEvent[];
  if (!backwards) {
    const start = allOptions.hasEnd() ? log.events.length : position === null ? 0 : countBefore(log, position);
    selected = log.events.slice(start);
  } else {
    const end = allOptions.hasStart() ? 0 : position === null ? log.events.length : countBefore(log, position);
    selected = log.events.slice(0, end).reverse();
  }
  let sent = 0n;
  for (const event of selected) {
    if (count !== null && sent >= count) break;
    if (filter && !filter(event)) continue;
    call.write(eventResponse(event));
    sent += 1n;
  }
  call.end();
}

/** Positions are (commit, prepare) pairs compared in that order; a fake event has both equal to its offset. */
function isAfter(eventPosition: bigint, position: { commit: bigint; prepare: bigint }): boolean {
  return eventPosition > position.commit || (eventPosition === position.commit && eventPosition > position.prepare);
}

/** Index of the first event strictly after `position`. */
function firstIndexAfter(log: FakeTransactionLog, position: { commit: bigint; prepare: bigint }): number {
  let index = log.indexAtOrAfter(position.commit);
  while (index < log.events.length && !isAfter(log.events[index].position, position)) index += 1;
  return index;
}

/** Number of events strictly before `position`. */
function countBefore(log: FakeTransactionLog, position: { commit: bigint; prepare: bigint }): number {
  let index = log.indexAtOrAfter(position.commit);
  // An event exactly at the commit position but with a smaller prepare position also comes before.
  while (index < log.events.length && log.events[index].position === position.commit && position.commit < position.prepare) index += 1;
  return index;
}

/** Catch-up, then live: the checkpoint and caught-up behaviour of Enumerator.AllSubscriptionFiltered. */
function subscribeToAll(
  log: FakeTransactionLog,
  call: ServerWritableStream<ReadReqMessage, ReadRespMessage>,
  liveSubscriptions: Set<() => void>,
  settings: { filter: ((event: LoggedEvent) => boolean) | null; filterOptions: FilterOptionsMessage | undefined; startIndex: number },
): void {
  const { filter, filterOptions } = settings;
  const window = filterOptions?.hasMax() ? filterOptions.getMax() : defaultSearchWindow;
  const checkpointInterval = filter ? Math.max(1, (filterOptions?.getCheckpointintervalmultiplier() || 1) * window) : Infinity;
  const confirmation = new ReadResp.SubscriptionConfirmation();
  confirmation.setSubscriptionId(randomUUID());
  const confirmed = new ReadResp();
  confirmed.setConfirmation(confirmation);
  call.write(confirmed);

  let considered = 0;
  let lastSent: bigint | null = null;
  const consider = (event: LoggedEvent) => {
    if (!filter || filter(event)) {
      call.write(eventResponse(event));
      lastSent = event.position;
      return;
    }
    considered += 1;
    if (considered >= checkpointInterval) {
      considered = 0;
      call.write(checkpointResponse(event.position));
      lastSent = event.position;
    }
  };
  // The log is in memory and appends run on this thread: catch-up and the switch to live cannot miss an event.
  for (let index = settings.startIndex; index < log.events.length; index += 1) consider(log.events[index]);
  const lastEvent = log.events[log.events.length - 1];
  if (filter && lastEvent && settings.startIndex < log.events.length && lastSent !== lastEvent.position) {
    // Going live always reports how far catch-up has read, so a filtered stretch at the end is passed too.
    call.write(checkpointResponse(lastEvent.position));
    considered = 0;
  }
  const caughtUp = new ReadResp();
  caughtUp.setCaughtUp(new ReadResp.CaughtUp());
  call.write(caughtUp);

  const unsubscribe = log.onAppend((event) => consider(event));
  const stop = () => {
    unsubscribe();
    liveSubscriptions.delete(stop);
  };
  liveSubscriptions.add(stop);
  call.on('cancelled', stop);
  call.on('close', stop);
  call.on('error', stop);
}

function toExpectedRevision(
  options:
    | InstanceType<typeof streamsPb.AppendReq.Options>
    | InstanceType<typeof streamsPb.BatchAppendReq.Options>,
): ExpectedRevision {
  if ('hasRevision' in options && options.hasRevision()) return { kind: 'revision', revision: BigInt(options.getRevision()) };
  if ('hasStreamPosition' in options && options.hasStreamPosition()) return { kind: 'revision', revision: BigInt(options.getStreamPosition()) };
  if (options.hasNoStream()) return { kind: 'no_stream' };
  if (options.hasStreamExists()) return { kind: 'stream_exists' };
  return { kind: 'any' };
}

/**
 * A real server's answer to an Append over its `MaxAppendSize` (RpcExceptions.MaxAppendSizeExceeded):
 * the call fails with InvalidArgument, and the `exception` and `maximum-append-size` trailers say
 * why (the client turns them into MaxAppendSizeExceededError).
 */
function maxAppendSizeExceeded(maxAppendSize: number): { code: grpcStatus; details: string; metadata: Metadata } {
  const metadata = new Metadata();
  metadata.set('exception', 'maximum-append-size-exceeded');
  metadata.set('maximum-append-size', String(maxAppendSize));
  return { code: grpcStatus.INVALID_ARGUMENT, details: `Maximum Append Size of ${maxAppendSize} Exceeded.`, metadata };
}

function serveAppend(
  log: FakeTransactionLog,
  maxAppendSize: number,
  call: ServerReadableStream<AppendReqMessage, AppendRespMessage>,
  callback: sendUnaryData<AppendRespMessage>,
): void {
  let options: InstanceType<typeof streamsPb.AppendReq.Options> | undefined;
  const proposed: ProposedEvent[] = [];
  let size = 0;
  let refused = false;
  call.on('data', (request: AppendReqMessage) => {
    if (refused) return;
    if (request.hasOptions()) options = request.getOptions();
    else if (request.hasProposedMessage()) {
      const event = toProposedEvent(request.getProposedMessage()!);
      // As a real server: the running total is checked as each event arrives, and the call fails at once.
      size += eventSizeOnDisk(event);
      if (size > maxAppendSize) {
        refused = true;
        callback(maxAppendSizeExceeded(maxAppendSize));
        return;
      }
      proposed.push(event);
    }
  });
  call.on('error', () => undefined); // a cancelled append just ends
  call.on('end', () => {
    if (refused) return;
    if (!options) return callback({ code: grpcStatus.INVALID_ARGUMENT, details: 'the first message must carry the options' });
    const expected = toExpectedRevision(options);
    const outcome = log.append(streamNameOf(options.getStreamIdentifier()), expected, proposed);
    const response = new AppendResp();
    if (outcome.kind === 'success') {
      const success = new AppendResp.Success();
      if (outcome.currentRevision === 'no_stream') success.setNoStream(new sharedPb.Empty());
      else success.setCurrentRevision(outcome.currentRevision.toString());
      if (outcome.position === undefined) success.setNoPosition(new sharedPb.Empty());
      else {
        const position = new AppendResp.Position();
        position.setCommitPosition(outcome.position.toString());
        position.setPreparePosition(outcome.position.toString());
        success.setPosition(position);
      }
      response.setSuccess(success);
    } else {
      const wrong = new AppendResp.WrongExpectedVersion();
      if (outcome.currentRevision === 'no_stream') wrong.setCurrentNoStream(new sharedPb.Empty());
      else wrong.setCurrentRevision(outcome.currentRevision.toString());
      if (expected.kind === 'revision') wrong.setExpectedRevision(expected.revision.toString());
      else if (expected.kind === 'no_stream') wrong.setExpectedNoStream(new sharedPb.Empty());
      else if (expected.kind === 'stream_exists') wrong.setExpectedStreamExists(new sharedPb.Empty());
      else wrong.setExpectedAny(new sharedPb.Empty());
      response.setWrongExpectedVersion(wrong);
    }
    callback(null, response);
  });
}

function serveBatchAppend(
  log: FakeTransactionLog,
  maxAppendSize: number,
  call: ServerDuplexStream<BatchAppendReqMessage, BatchAppendRespMessage>,
): void {
  const pending = new Map<string, { options: InstanceType<typeof streamsPb.BatchAppendReq.Options>; proposed: ProposedEvent[]; size: number }>();
  call.on('data', (request: BatchAppendReqMessage) => {
    const correlationId = request.getCorrelationId()?.getString() ?? '';
    let batch = pending.get(correlationId);
    if (!batch) {
      const options = request.getOptions();
      if (!options) return; // the first request of a batch carries the options (or its batch was refused: the rest is dropped)
      batch = { options, proposed: [], size: 0 };
      pending.set(correlationId, batch);
    }
    const events = request.getProposedMessagesList().map(toProposedEvent);
    batch.proposed.push(...events);
    batch.size += events.reduce((sum, event) => sum + eventSizeOnDisk(event), 0);
    if (batch.size > maxAppendSize) {
      // As a real server (Streams.BatchAppend): checked after each request of the batch; the
      // batch is dropped and answered at once with a MaximumAppendSizeExceeded status.
      pending.delete(correlationId);
      call.write(batchAppendSizeExceeded(request.getCorrelationId()!, batch.options, maxAppendSize));
      return;
    }
    if (!request.getIsFinal()) return;
    pending.delete(correlationId);
    const expected = toExpectedRevision(batch.options);
    const outcome = log.append(streamNameOf(batch.options.getStreamIdentifier()), expected, batch.proposed);
    call.write(batchAppendResponse(request.getCorrelationId()!, batch.options, expected, outcome));
  });
  call.on('error', () => undefined); // the client cancels its batch stream when it is disposed
  call.on('end', () => call.end());
}

function batchAppendSizeExceeded(
  correlationId: InstanceType<typeof sharedPb.UUID>,
  options: InstanceType<typeof streamsPb.BatchAppendReq.Options>,
  maxAppendSize: number,
): BatchAppendRespMessage {
  const exceeded = new sharedPb.MaximumAppendSizeExceeded();
  exceeded.setMaxappendsize(maxAppendSize);
  const response = new BatchAppendResp();
  response.setCorrelationId(correlationId);
  response.setStreamIdentifier(options.getStreamIdentifier());
  response.setError(batchAppendError(codePb.Code.INVALID_ARGUMENT, 'MaximumAppendSizeExceeded', exceeded));
  return response;
}

/** A BatchAppend failure as the server sends it: a google.rpc.Status named after the error, the error packed as its details. */
function batchAppendError(code: number, name: 'MaximumAppendSizeExceeded' | 'WrongExpectedVersion', detail: { serializeBinary(): Uint8Array }) {
  const details = new anyPb.Any();
  details.pack(detail.serializeBinary(), `event_store.client.${name}`);
  const error = new statusPb.Status();
  error.setCode(code);
  error.setMessage(name);
  error.setDetails(details);
  return error;
}

function batchAppendResponse(
  correlationId: InstanceType<typeof sharedPb.UUID>,
  options: InstanceType<typeof streamsPb.BatchAppendReq.Options>,
  expected: ExpectedRevision,
  outcome: AppendOutcome,
): BatchAppendRespMessage {
  const response = new BatchAppendResp();
  response.setCorrelationId(correlationId);
  response.setStreamIdentifier(options.getStreamIdentifier());
  if (outcome.kind === 'success') {
    const success = new BatchAppendResp.Success();
    if (outcome.currentRevision === 'no_stream') success.setNoStream(new emptyPb.Empty());
    else success.setCurrentRevision(outcome.currentRevision.toString());
    if (outcome.position === undefined) success.setNoPosition(new emptyPb.Empty());
    else {
      const position = new sharedPb.AllStreamPosition();
      position.setCommitPosition(outcome.position.toString());
      position.setPreparePosition(outcome.position.toString());
      success.setPosition(position);
    }
    response.setSuccess(success);
    return response;
  }
  const wrong = new sharedPb.WrongExpectedVersion();
  if (outcome.currentRevision === 'no_stream') wrong.setCurrentNoStream(new emptyPb.Empty());
  else wrong.setCurrentStreamRevision(outcome.currentRevision.toString());
  if (expected.kind === 'revision') wrong.setExpectedStreamPosition(expected.revision.toString());
  else if (expected.kind === 'no_stream') wrong.setExpectedNoStream(new emptyPb.Empty());
  else if (expected.kind === 'stream_exists') wrong.setExpectedStreamExists(new emptyPb.Empty());
  else wrong.setExpectedAny(new emptyPb.Empty());
  response.setError(batchAppendError(codePb.Code.FAILED_PRECONDITION, 'WrongExpectedVersion', wrong));
  return response;
}
