/**
 * The in-memory transaction log behind the fake EventStoreDB server: streams, revisions,
 * `$all` positions and the server's expected-revision and idempotency rules.
 *
 * Positions imitate a real server's: every event is one record of the transaction file, its
 * position is the byte offset of the record (commit position = prepare position, as for every
 * event written through gRPC), so positions increase but are not contiguous.
 */

export type ExpectedRevision =
  | { kind: 'any' }
  | { kind: 'no_stream' }
  | { kind: 'stream_exists' }
  | { kind: 'revision'; revision: bigint };

export interface ProposedEvent {
  id: string;
  type: string;
  contentType: string;
  data: Uint8Array;
  customMetadata: Uint8Array;
}

export interface LoggedEvent extends ProposedEvent {
  streamName: string;
  revision: bigint;
  /** Commit and prepare position: the byte offset of the record. */
  position: bigint;
  /** 100 ns ticks since the Unix epoch, as the server's `created` metadata. */
  createdTicks: bigint;
}

export type AppendOutcome =
  /** `position` is undefined for an idempotent retry: nothing was written (a real server answers NoPosition). */
  | { kind: 'success'; currentRevision: bigint | 'no_stream'; position: bigint | undefined }
  | { kind: 'wrong_expected_version'; currentRevision: bigint | 'no_stream' };

/** Where a real log's first user event could be: the epoch and settings records come first. */
const firstRecordPosition = 1024n;
/** Header, stream name, ids and framing of a record, roughly as in the real log format. */
const recordOverhead = 96n;

export class FakeTransactionLog {
  readonly events: LoggedEvent[] = [];
  private readonly streams = new Map<string, LoggedEvent[]>();
  private nextPosition = firstRecordPosition;
  private readonly listeners = new Set<(event: LoggedEvent) => void>();

  /** Applies the server's rules (Core IndexCommitter.CheckCommit) and writes the batch atomically. */
  append(streamName: string, expected: ExpectedRevision, proposed: readonly ProposedEvent[]): AppendOutcome {
    const stream = this.streams.get(streamName) ?? [];
    const current: bigint | 'no_stream' = stream.length === 0 ? 'no_stream' : BigInt(stream.length - 1);
    const currentNumber = current === 'no_stream' ? -1n : current;

    if (expected.kind === 'stream_exists' && current === 'no_stream') {
      return { kind: 'wrong_expected_version', currentRevision: current };
    }
    if (expected.kind === 'any' || expected.kind === 'stream_exists') {
      const idempotency = this.checkIdempotentByIds(streamName, proposed);
      if (idempotency === 'corrupted') return { kind: 'wrong_expected_version', currentRevision: current };
      if (idempotency !== 'new') return { kind: 'success', currentRevision: idempotency, position: undefined };
    } else {
      const expectedNumber = expected.kind === 'no_stream' ? -1n : expected.revision;
      if (expectedNumber > currentNumber) return { kind: 'wrong_expected_version', currentRevision: current };
      if (expectedNumber < currentNumber) {
        // A retry of a write that already happened at this revision is acknowledged, not repeated.
        const already = stream.slice(Number(expectedNumber + 1n), Number(expectedNumber + 1n) + proposed.length);
        const sameIds = proposed.length > 0 && already.length === proposed.length && already.every((event, index) => event.id === proposed[index].id);
        if (sameIds) return { kind: 'success', currentRevision: already[already.length - 1].revision, position: undefined };
        return { kind: 'wrong_expected_version', currentRevision: current };
      }
    }
    if (proposed.length === 0) return { kind: 'success', currentRevision: current, position: undefined };

    const createdTicks = BigInt(Date.now()) * 10_000n;
    const written: LoggedEvent[] = proposed.map((event, index) => {
      const position = this.nextPosition;
      this.nextPosition += recordOverhead + BigInt(Buffer.byteLength(streamName) + event.type.length + event.data.length + event.customMetadata.length);
      return { ...event, streamName, revision: currentNumber + 1n + BigInt(index), position, createdTicks };
    });
    stream.push(...written);
    this.streams.set(streamName, stream);
    this.events.push(...written);
    for (const event of written) for (const listener of this.listeners) listener(event);
    const last = written[written.length - 1];
    return { kind: 'success', currentRevision: last.revision, position: last.position };
  }

  /** `new` (no id seen in this stream), the revision of the identical earlier write, or `corrupted` (a partial match). */
  private checkIdempotentByIds(streamName: string, proposed: readonly ProposedEvent[]): 'new' | 'corrupted' | bigint {
    if (proposed.length === 0) return 'new';
    const stream = this.streams.get(streamName) ?? [];
    const start = stream.findIndex((event) => event.id === proposed[0].id);
    if (start < 0) return 'new';
    for (let index = 0; index < proposed.length; index += 1) {
      if (stream[start + index]?.id !== proposed[index].id) return 'corrupted';
    }
    return stream[start + proposed.length - 1].revision;
  }

  stream(streamName: string): readonly LoggedEvent[] | undefined {
    return this.streams.get(streamName);
  }

  /** Position just past the last record: where a live subscription starts. */
  get endPosition(): bigint {
    return this.nextPosition;
  }

  /** Index of the first event at or after `position` (forwards reads are inclusive). */
  indexAtOrAfter(position: bigint): number {
    let low = 0;
    let high = this.events.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.events[middle].position < position) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  onAppend(listener: (event: LoggedEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
