/**
 * A real pipeline log for the event-store bench: the embedded service (PGlite, local models)
 * runs the whole pipeline over the test corpus (test/fixtures/corpus), and its log is kept as
 * JSON lines under bench/.tmp so later runs reuse it (BENCH_REFRESH_LOG=1 makes it again).
 * `replicate` turns it into a larger log of the same shape: each copy is the corpus run again
 * in its own repository, every UUID in it (ids of repositories, sources, facts, concepts,
 * events) changed the same way within the copy, so copies never collide.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { NewEvent, RecordedEvent } from '../src/eventstore/envelope.js';
import type { EventStore } from '../src/eventstore/port.js';
import { createRepository, injectApi, PIPELINE_TEST_OVERRIDES, registerCorpus, startCorpusServer, waitForPipeline } from '../test/helpers/corpus.js';
import { registerUser, startTestService } from '../test/helpers/service.js';
import { log } from './common.js';

const logFile = path.resolve('bench/.tmp/corpus-log.jsonl');

/** The recorded events of one pipeline run over the corpus, in log order. */
export async function corpusPipelineLog(): Promise<RecordedEvent[]> {
  if (existsSync(logFile) && !process.env.BENCH_REFRESH_LOG) {
    const text = await readFile(logFile, 'utf8');
    return text
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as RecordedEvent);
  }
  log('  running the pipeline over the test corpus to record a real log (cached in bench/.tmp)');
  const web = await startCorpusServer();
  const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
  const events: RecordedEvent[] = [];
  try {
    const { token } = await registerUser(service, 'bench@example.org');
    const api = injectApi(service, token);
    const repositoryId = await createRepository(api, 'Corpus');
    await registerCorpus(api, repositoryId, web.documents);
    await waitForPipeline(api, repositoryId, { timeoutMs: 900_000 });
    for (let after = 0; ; ) {
      const page = await service.context.store.readAll({ after, limit: 1000 });
      if (page.length === 0) break;
      events.push(...page);
      after = page[page.length - 1].globalPosition;
    }
  } finally {
    await service.close();
    await web.close();
  }
  await mkdir(path.dirname(logFile), { recursive: true });
  await writeFile(logFile, events.map((event) => JSON.stringify(event)).join('\n') + '\n');
  return events;
}

const uuidPattern = /[0-9a-f]{8}(?=-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/gi;

/** `text` with the first 8 hex digits of every UUID xor-ed with `copy`: a bijection per copy. */
function shiftUuids(text: string, copy: number): string {
  if (copy === 0) return text;
  return text.replace(uuidPattern, (head) => ((Number.parseInt(head, 16) ^ copy) >>> 0).toString(16).padStart(8, '0'));
}

/** The events of copy `copy` of `events`, as appends: runs of consecutive events of one stream. */
export function replicatedAppends(events: readonly RecordedEvent[], copy: number): Array<{ streamId: string; expected: number | 'no_stream'; events: NewEvent[] }> {
  const appends: Array<{ streamId: string; expected: number | 'no_stream'; events: NewEvent[] }> = [];
  for (const source of events) {
    const event = JSON.parse(shiftUuids(JSON.stringify(source), copy)) as RecordedEvent;
    const newEvent: NewEvent = {
      type: event.type,
      data: event.data,
      schemaVersion: event.schemaVersion,
      eventId: event.eventId,
      metadata: { repositoryId: event.repositoryId, actor: event.actor, causationId: event.causationId, correlationId: event.correlationId },
    };
    const last = appends[appends.length - 1];
    if (last && last.streamId === event.streamId) last.events.push(newEvent);
    else appends.push({ streamId: event.streamId, expected: event.streamVersion === 0 ? 'no_stream' : event.streamVersion - 1, events: [newEvent] });
  }
  return appends;
}

/** Appends `copies` copies of `events` to `store`; returns the number of events appended. */
export async function appendReplicatedLog(store: EventStore, events: readonly RecordedEvent[], copies: number): Promise<number> {
  let appended = 0;
  for (let copy = 0; copy < copies; copy += 1) {
    for (const append of replicatedAppends(events, copy)) {
      await store.append(append.streamId, append.events, append.expected);
      appended += append.events.length;
    }
  }
  return appended;
}
