import type { NewEvent, RecordedEvent } from './envelope.js';
import type { EventStore } from './port.js';

export interface CopyProgress {
  /** Events appended to the target so far. */
  copied: number;
  /** Events the target already held (an earlier, interrupted or complete, copy). */
  skipped: number;
  /** Source global position copied up to. */
  position: number;
}

export interface CopyOptions {
  /** Called after each page of the source log. */
  onProgress?: (progress: CopyProgress) => void;
  /** Source events read per page; default 1000. */
  pageSize?: number;
}

/**
 * Copies the whole log of `from` into `to` in global order (`factlog events copy --to ...`).
 *
 * Each event keeps its stream, stream version, event id, type, schema version, data and envelope
 * metadata; it is appended with the expected version just below its own, so the target's streams
 * are the source's. Consecutive events of one stream go in one append. The target assigns its own
 * global positions and recording times (the port's NewEvent has no slot for either).
 *
 * Re-running is safe: an event the target already holds at the same stream version with the same
 * id is skipped, so an interrupted copy resumes. A target stream holding a different event at that
 * version means the logs have diverged: the copy stops with an error rather than guess.
 * Run it against a target nobody else writes to meanwhile.
 */
export async function copyEvents(from: EventStore, to: EventStore, options: CopyOptions = {}): Promise<CopyProgress> {
  const pageSize = options.pageSize ?? 1000;
  if (!Number.isInteger(pageSize) || pageSize < 1) throw new RangeError('pageSize must be an integer >= 1');
  const progress: CopyProgress = { copied: 0, skipped: 0, position: 0 };
  /** Per target stream: the ids it held before this copy touched it (to recognise events copied before), then just its length. */
  const targetStreams = new Map<string, { length: number; heldIds: string[] | null }>();

  const targetStream = async (streamId: string) => {
    let known = targetStreams.get(streamId);
    if (!known) {
      const held = await to.readStream(streamId);
      known = { length: held.length, heldIds: held.map((event) => event.eventId.toLowerCase()) };
      targetStreams.set(streamId, known);
    }
    return known;
  };

  for (;;) {
    const page = await from.readAll({ after: progress.position, limit: pageSize });
    if (page.length === 0) return progress;
    let run: RecordedEvent[] = [];
    const flush = async () => {
      if (run.length === 0) return;
      const first = run[0];
      const target = await targetStream(first.streamId);
      await to.append(first.streamId, run.map(toNewEvent), first.streamVersion === 0 ? 'no_stream' : first.streamVersion - 1);
      target.length += run.length;
      target.heldIds = null; // from here on the stream only grows through this copy
      progress.copied += run.length;
      run = [];
    };
    for (const event of page) {
      const target = await targetStream(event.streamId);
      const pendingInRun = run.length > 0 && run[0].streamId === event.streamId ? run.length : 0;
      const targetVersion = target.length + pendingInRun;
      if (event.streamVersion < targetVersion) {
        const heldId = target.heldIds?.[event.streamVersion];
        if (heldId !== event.eventId.toLowerCase()) {
          throw new Error(
            `cannot copy ${event.streamId}@${event.streamVersion} (event ${event.eventId}): the target holds ${heldId ?? 'another event'} there`,
          );
        }
        progress.skipped += 1;
        continue;
      }
      if (event.streamVersion > targetVersion) {
        throw new Error(`cannot copy ${event.streamId}@${event.streamVersion}: the target stream ends at version ${targetVersion - 1}`);
      }
      if (run.length > 0 && run[0].streamId !== event.streamId) await flush();
      run.push(event);
    }
    await flush();
    progress.position = page[page.length - 1].globalPosition;
    options.onProgress?.({ ...progress });
  }
}

function toNewEvent(event: RecordedEvent): NewEvent {
  return {
    type: event.type,
    data: event.data,
    schemaVersion: event.schemaVersion,
    eventId: event.eventId,
    metadata: {
      repositoryId: event.repositoryId,
      actor: event.actor,
      causationId: event.causationId,
      correlationId: event.correlationId,
    },
  };
}
