import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import type { Database } from '../../src/db/database.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';
import { repositoryDecider } from '../../src/domain/repository/decider.js';
import { sourceDecider } from '../../src/domain/source/decider.js';
import { handleCommand } from '../../src/eventstore/commandHandler.js';
import { streamName, type EventMetadata, type RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { createPostgresEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { contentHash } from '../../src/interchange/hashing.js';
import { packVector } from '../../src/interchange/vectors.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { readModelProjections } from '../../projections/index.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import { scheduledJobContext } from '../helpers/jobContext.js';
import { factIdFor } from '../../src/pipeline/stages/sourceDecomposition.js';
import { JobRepository } from '../../src/pipeline/jobs.js';
import type { JobContext, Stage } from '../../src/pipeline/types.js';
import { postgresSearchIndexOn } from '../../src/app/wiring/search.js';
import type { SearchIndex } from '../../src/search/port.js';
import { withOverrides } from '../eventstore/contract.js';

/**
 * A real embedded pipeline for stage tests: PGlite with the event store, every read-model
 * projection and the search-index projection (pgvector) running, so a test appends the events
 * a stage is triggered by, runs the stage as the runtime would, and reads what it appended.
 */
export interface StageFixture {
  db: Database;
  store: EventStore;
  search: SearchIndex;
  runner: ProjectionRunner;
  /** Waits until every projection has applied the log up to its head. */
  settle(): Promise<void>;
  createRepository(options?: { preset?: string }): Promise<string>;
  /** A processed source with these facts (FactsExtracted recorded); returns its ids and the trigger. */
  addSource(
    repositoryId: string,
    contents: readonly string[],
  ): Promise<{ sourceId: string; factIds: string[]; extracted: RecordedEvent }>;
  /** Appends FactsEmbedded for a source with the given vectors (by fact id). */
  embedSource(repositoryId: string, sourceId: string, vectors: ReadonlyMap<string, number[]>, model?: string): Promise<RecordedEvent>;
  /** The job context the runtime would give a stage for `trigger` (attempt 1 unless told). */
  contextFor(stage: Stage, trigger: RecordedEvent, options?: { attempts?: number; signal?: AbortSignal }): JobContext;
  /** The context of a scheduled job of `stage` for the repository. */
  scheduledContextFor(stage: Stage, repositoryId: string, options?: { attempts?: number; signal?: AbortSignal }): JobContext;
  /** Events of a stream, optionally only of one type. */
  eventsOf(stream: string, type?: string): Promise<RecordedEvent[]>;
  /** Every event of these types in the log, in order. */
  eventsOfType(...types: string[]): Promise<RecordedEvent[]>;
  /** The last event of `type` on the stream. */
  last(stream: string, type: string): Promise<RecordedEvent>;
}

export const testMetadata = (repositoryId: string | null): EventMetadata => ({
  repositoryId,
  actor: 'user-test',
  causationId: null,
  correlationId: randomUUID(),
});

export const TEST_MODEL = 'test/model-v1';

/** A unit vector in `dimensions` pointing mostly along `axis`, tilted by `tilt` towards axis+1. */
export function axisVector(dimensions: number, axis: number, tilt = 0): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  vector[axis % dimensions] = Math.cos(tilt);
  vector[(axis + 1) % dimensions] = Math.sin(tilt);
  return vector;
}

export async function openStageFixture(t: Test, options: { dimensions?: number; open?: () => Promise<Database> } = {}): Promise<StageFixture> {
  const dimensions = options.dimensions ?? 100;
  // `open`: another migrated database than a PGlite one (a scratch database on the server, say).
  const db = await (options.open ?? openMigratedDatabase)();
  const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load() });
  // As the embedded tier wires it: k-NN from the graphs in this process.
  const search = postgresSearchIndexOn(db, dimensions);
  const runner = new ProjectionRunner(store, db, [...readModelProjections, createSearchIndexProjection(search)], { retryBaseMs: 20 });
  await runner.start();
  t.teardown(async () => {
    await runner.stop();
    await store.close();
    await db.close();
  });

  // The last committed event, not headPosition (the last one visible to readers): on the server a
  // projection's open transaction hides later commits from readers, so the head could be short of
  // an append that just returned, and settling would not wait for it.
  const settle = async (): Promise<void> => {
    const [{ head }] = await db.knex('events').max<Array<{ head: string | number | null }>>('global_position as head');
    await runner.waitFor(Number(head ?? 0), 20_000);
  };

  const jobs = new JobRepository(db.knex);

  function contextWith(stage: Stage, trigger: RecordedEvent, options: { attempts?: number; signal?: AbortSignal }): JobContext {
    const now = new Date().toISOString();
    const subjectId = stage.subjectOf(trigger) ?? '';
    return {
      job: {
        id: randomUUID(),
        kind: stage.kind,
        repositoryId: trigger.repositoryId,
        subjectId,
        sourceId: null,
        reportId: null,
        triggerEventId: trigger.eventId,
        triggerPosition: trigger.globalPosition,
        correlationId: trigger.correlationId,
        state: 'running',
        attempts: options.attempts ?? 1,
        lastError: null,
        createdAt: now,
        updatedAt: now,
      },
      trigger,
      scheduled: false,
      signal: options.signal ?? new AbortController().signal,
      actor: `system:${stage.kind}`,
      coverQueued: coverQueuedOf(stage, subjectId),
    };
  }

  /** As the runtime covers: the fixture's jobs table holds what a test enqueued there. */
  const coverQueuedOf = (stage: Stage, subjectId: string) => (throughPosition: number) => jobs.endCovered(stage.kind, subjectId, throughPosition);

  const fixture: StageFixture = {
    db,
    store,
    search,
    runner,
    settle,

    async createRepository({ preset = 'general' } = {}) {
      const id = randomUUID();
      await handleCommand(
        store,
        streamName('repository', id),
        repositoryDecider,
        {
          type: 'CreateRepository',
          name: `Repo ${id.slice(0, 8)}`,
          slug: `repo-${id.slice(0, 8)}`,
          description: '',
          preset,
          tier: 'shared',
          acceptedPromptsetHashes: [],
          registryId: null,
        },
        testMetadata(id),
      );
      await settle();
      return id;
    },

    async addSource(repositoryId, contents) {
      const sourceId = randomUUID();
      const stream = streamName('source', sourceId);
      const metadata = testMetadata(repositoryId);
      await handleCommand(store, stream, sourceDecider, { type: 'RegisterSource', origin: 'url', url: `https://example.org/${sourceId}` }, metadata);
      await handleCommand(
        store,
        stream,
        sourceDecider,
        {
          type: 'RecordFetch',
          fetched: {
            final_url: `https://example.org/${sourceId}`,
            content_type: 'text/plain',
            body_sha256: 'a'.repeat(64),
            body_bytes: 1,
            document_kind: 'text',
            title: null,
            published_at: null,
            text_sha256: 'b'.repeat(64),
            markdown_sha256: 'c'.repeat(64),
            text_chars: 1,
          },
        },
        metadata,
      );
      const facts = contents.map((content) => {
        const hash = contentHash(content);
        return { fact_id: factIdFor(repositoryId, hash), content, content_hash: hash, source_text: content, chunk_index: 0 };
      });
      const result = await handleCommand(store, stream, sourceDecider, { type: 'RecordFacts', modelId: 'local/rule-based-v1', facts }, metadata);
      const extracted = (await store.readStream(stream)).find((event) => event.globalPosition === result.position);
      if (!extracted) throw new Error('FactsExtracted was not stored');
      return { sourceId, factIds: facts.map((fact) => fact.fact_id), extracted };
    },

    async embedSource(repositoryId, sourceId, vectors, model = TEST_MODEL) {
      const first = vectors.values().next().value;
      const result = await handleCommand(
        store,
        streamName('source', sourceId),
        sourceDecider,
        {
          type: 'RecordEmbeddings',
          model,
          dimensions: first ? first.length : dimensions,
          vectors: [...vectors].map(([factId, vector]) => ({ fact_id: factId, vector: packVector(vector) })),
        },
        testMetadata(repositoryId),
      );
      return fixture.last(streamName('source', sourceId), 'FactsEmbedded').then((event) => {
        if (event.globalPosition !== result.position) throw new Error('FactsEmbedded was not recorded');
        return event;
      });
    },

    contextFor(stage, trigger, options = {}) {
      return contextWith(stage, trigger, options);
    },

    scheduledContextFor(stage, repositoryId, options = {}) {
      return scheduledJobContext(stage, repositoryId, { ...options, coverQueued: coverQueuedOf(stage, repositoryId) });
    },

    async eventsOf(stream, type) {
      const events = await store.readStream(stream);
      return type === undefined ? events : events.filter((event) => event.type === type);
    },

    async eventsOfType(...types) {
      const events: RecordedEvent[] = [];
      let after = 0;
      for (;;) {
        const page = await store.readAll({ after, limit: 1000, types });
        if (page.length === 0) return events;
        events.push(...page);
        after = page[page.length - 1].globalPosition;
      }
    },

    async last(stream, type) {
      const events = await fixture.eventsOf(stream, type);
      const event = events[events.length - 1];
      if (!event) throw new Error(`no ${type} on ${stream}`);
      return event;
    },
  };
  return fixture;
}

/**
 * The store with another writer racing it: before an append to a stream `raced` picks, up to
 * `times` times, `interleave` writes to that stream first (a real append, as another stage
 * would), so the append's expected version is stale and it loses. `races` counts them.
 */
export function racedStore(
  store: EventStore,
  raced: (streamId: string) => boolean,
  interleave: (streamId: string) => Promise<void>,
  times = Number.POSITIVE_INFINITY,
): EventStore & { races: number } {
  const overrides = {
    races: 0,
    append: (async (streamId, events, expected) => {
      if (raced(streamId) && overrides.races < times) {
        overrides.races++;
        await interleave(streamId);
      }
      return store.append(streamId, events, expected);
    }) as EventStore['append'],
    // A multi-stream append races the same way, for each raced stream in it.
    appendToStreams: (async (appends) => {
      for (const { streamId } of appends) {
        if (raced(streamId) && overrides.races < times) {
          overrides.races++;
          await interleave(streamId);
        }
      }
      return store.appendToStreams(appends);
    }) as EventStore['appendToStreams'],
  };
  return withOverrides(store, overrides);
}
