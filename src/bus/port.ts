import type { RecordedEvent } from '../eventstore/envelope.js';

/**
 * The Bus port: how pipeline stages (job intake) and projections receive the log.
 *
 * - Embedded tier (`log.ts`): a catch-up subscription on the event store's global log; events
 *   arrive in global order and the consumer's checkpoint is a global position.
 * - Distributed tier (`kafka.ts`): a relay publishes every event to `<prefix>.<category>` topics
 *   keyed by stream id; consumers read in consumer groups. Order holds within a stream only, and
 *   delivery is at least once, so a consumer absorbs duplicates by (stream id, stream version).
 */
export interface BusConsumerOptions {
  /** Consumer group: the projection name or `stage.<kind>`; one group reads each event once. */
  group: string;
  /** Event types the consumer needs; others may be skipped without calling the handler. */
  types: readonly string[];
  /**
   * Called with each batch. The bus acknowledges (commits the offset / advances the
   * checkpoint) only after the promise resolves, so an effect stored in the handler's own
   * transaction together with its per-stream checkpoint takes effect exactly once.
   */
  handler: (batch: RecordedEvent[]) => Promise<void>;
  /** Called when a message cannot be decoded; it goes to the dead-letter topic and consumption goes on. */
  onDeadLetter?: (reason: string, raw: { topic: string; partition: number; offset: string }) => void;
}

export interface BusConsumer {
  stop(): Promise<void>;
}

export interface Bus {
  consume(options: BusConsumerOptions): Promise<BusConsumer>;
  close(): Promise<void>;
}

/** Kafka topic category of a stream (`source-<id>` → `sources`). */
export function topicCategory(streamId: string): string {
  const dash = streamId.indexOf('-');
  const category = dash < 0 ? streamId : streamId.slice(0, dash);
  if (category.endsWith('s')) return category;
  return category.endsWith('y') ? `${category.slice(0, -1)}ies` : `${category}s`;
}
