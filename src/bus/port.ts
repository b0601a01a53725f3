import type { RecordedEvent } from '../eventstore/envelope.js';

/**
 * The Bus port: how pipeline stages (job intake) and projections receive the log on the
 * distributed tier (`bus.backend: kafka`, adapter `kafka.ts`): a relay publishes every event to
 * `<prefix>.<category>` topics keyed by stream id; consumers read in consumer groups. Order holds
 * within a stream only, and delivery is at least once, so a consumer absorbs duplicates by
 * (stream id, stream version).
 *
 * The embedded tier (`bus.backend: log`) has no Bus: its projection runner
 * (`src/projection/runner.ts`) subscribes to the event store's global log directly and keeps
 * its checkpoints in the projection's own transaction (docs/architecture.md, "The embedded tier
 * has no bus").
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
  /**
   * Per group: messages published to the topics the group reads that it has not acknowledged
   * yet, whichever node consumes them; 0 when it has committed all it was sent.
   */
  backlog(groups: readonly string[]): Promise<Map<string, number>>;
  /** The groups among `groups` that have a member consuming now, on any node. */
  consumingGroups(groups: readonly string[]): Promise<Set<string>>;
  close(): Promise<void>;
}

/**
 * Kafka topic category of a stream, its category in the plural (`source-<id>` → `sources`,
 * `repository-<id>` → `repositories`, `apikey-<id>` → `apikeys`). Until 2026-12-01 a vowel
 * before the final y was not told apart, so `apikey-` streams went to `<prefix>.apikeies`: a
 * node of this release writes `<prefix>.apikeys`, and its consumers still read the older topic
 * (every `<prefix>.<category>` topic is subscribed), so what was written there is not lost.
 */
export function topicCategory(streamId: string): string {
  const dash = streamId.indexOf('-');
  const category = dash < 0 ? streamId : streamId.slice(0, dash);
  if (category.endsWith('s')) return category;
  return /[^aeiou]y$/.test(category) ? `${category.slice(0, -1)}ies` : `${category}s`;
}

/** The part of a pino logger the bus adapters use (pino loggers and test spies fit). */
export interface BusLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

export const silentBusLogger: BusLogger = { info() {}, warn() {}, error() {} };

/** Checks that apply to every Bus adapter: a group name, and at least one event type. */
export function validateConsumerOptions(options: BusConsumerOptions): void {
  if (typeof options.group !== 'string' || options.group.trim() === '') throw new RangeError('group must be a non-empty string');
  if (!Array.isArray(options.types) || options.types.length === 0) {
    throw new RangeError(`group ${options.group}: types must name at least one event type`);
  }
  if (options.types.some((type) => typeof type !== 'string' || type === '')) {
    throw new RangeError(`group ${options.group}: every type must be a non-empty string`);
  }
  if (typeof options.handler !== 'function') throw new RangeError(`group ${options.group}: handler must be a function`);
}
