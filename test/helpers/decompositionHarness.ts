import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';
import { PNG } from 'pngjs';

import type { Database } from '../../src/db/database.js';
import { sourceDecider, type SourceCommand, type SourceState } from '../../src/domain/source/decider.js';
import { handleCommand, loadState } from '../../src/eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { createPostgresEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import type { Projection } from '../../src/projection/types.js';
import type { JobContext, Stage } from '../../src/pipeline/types.js';
import { createLocalFactExtractor } from '../../src/providers/llm/local.js';
import { localSliceSummary, localSynthesis } from '../../src/providers/llm/localSummaries.js';
import type { ChatModel, ExtractedFact, ImageInput } from '../../src/providers/llm/port.js';
import { createFileAssetStore, type AssetStore } from '../../src/storage/assets.js';
import { sourcesProjection } from '../../projections/sources.js';
import { openMemoryPglite } from '../eventstore/contract.js';
import { migrateEmbeddedSchema } from './schema.js';

export const REPOSITORY_ID = 'repo-stages';

/**
 * The parts the source stages run on, all real: an in-memory PGlite holding the event store and
 * the read models, and a file asset store in a temporary directory. Closed with `t`; open one
 * per test file (opening PGlite takes seconds) and share it between subtests.
 */
export async function openStageFixture(t: Test) {
  const db: Database = await openMemoryPglite();
  await migrateEmbeddedSchema(db.knex);
  const store: EventStore = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load() });
  const assetsDir = await mkdtemp(path.join(tmpdir(), 'factlog-assets-'));
  const assets: AssetStore = createFileAssetStore(assetsDir);
  t.teardown(async () => {
    await db.close();
    await rm(assetsDir, { recursive: true, force: true });
  });
  let projected = 0;

  /** Registers a source (a URL, or an upload whose body goes to the asset store first). */
  async function register(
    source: { url: string } | { upload: Buffer; contentType: string; filename?: string },
  ): Promise<string> {
    const id = randomUUID();
    let command: SourceCommand;
    if ('url' in source) {
      command = { type: 'RegisterSource', origin: 'url', url: source.url };
    } else {
      const body = await assets.put(source.upload);
      command = {
        type: 'RegisterSource',
        origin: 'upload',
        filename: source.filename ?? null,
        contentType: source.contentType,
        bodySha256: body.sha256,
        bodyBytes: body.bytes,
      };
    }
    await handleCommand(store, streamName('source', id), sourceDecider, command, { repositoryId: REPOSITORY_ID, actor: 'user-1', causationId: null, correlationId: null });
    return id;
  }

  /** The context the runtime gives a job of `stage` on the source, on attempt `attempt`. */
  async function contextFor(stage: Stage, sourceId: string, attempt = 1): Promise<JobContext> {
    const triggers = (await store.readStream(streamName('source', sourceId))).filter((event) => stage.triggers.includes(event.type));
    const trigger = triggers[triggers.length - 1];
    if (!trigger) throw new Error(`no ${stage.triggers.join('/')} event on source ${sourceId}`);
    const now = new Date().toISOString();
    return {
      job: {
        id: randomUUID(),
        kind: stage.kind,
        repositoryId: REPOSITORY_ID,
        subjectId: sourceId,
        sourceId,
        reportId: null,
        triggerEventId: trigger.eventId,
        triggerPosition: trigger.globalPosition,
        correlationId: trigger.correlationId,
        state: 'running',
        attempts: attempt,
        lastError: null,
        createdAt: now,
        updatedAt: now,
      },
      trigger,
      scheduled: false,
      signal: new AbortController().signal,
      actor: `system:${stage.kind}`,
      coverQueued: async () => 0,
    };
  }

  /** Runs `stage` on the source as the runtime would on attempt `attempt`; resolves with the job's error, if any. */
  async function run(stage: Stage, sourceId: string, attempt = 1): Promise<Error | null> {
    const context = await contextFor(stage, sourceId, attempt);
    try {
      await stage.run(context);
      return null;
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error));
    }
  }

  async function state(sourceId: string): Promise<Exclude<SourceState, { status: 'none' }>> {
    const { state: loaded } = await loadState(store, streamName('source', sourceId), sourceDecider);
    if (loaded.status === 'none') throw new Error(`source ${sourceId} does not exist`);
    return loaded;
  }

  async function events(sourceId: string): Promise<RecordedEvent[]> {
    return store.readStream(streamName('source', sourceId));
  }

  /** Applies the log's new events to `projections` (in order, one transaction per event). */
  async function project(projections: readonly Projection[] = [sourcesProjection]): Promise<void> {
    for (;;) {
      const batch = await store.readAll({ after: projected, limit: 500 });
      if (batch.length === 0) return;
      for (const event of batch) {
        await db.knex.transaction(async (trx) => {
          for (const projection of projections) {
            if (projection.eventTypes.includes(event.type)) await projection.apply(trx, event);
          }
        });
        projected = event.globalPosition;
      }
    }
  }

  return { db, store, assets, register, contextFor, run, state, events, project };
}

/** A PNG of deterministic noise (noise does not compress: about width × height × 4 bytes). */
export function noisePng(width: number, height: number, seed = 1): Buffer {
  const png = new PNG({ width, height });
  let value = seed >>> 0 || 1;
  for (let index = 0; index < png.data.length; index += 1) {
    value = (Math.imul(value, 1664525) + 1013904223) >>> 0;
    png.data[index] = index % 4 === 3 ? 255 : value >>> 24;
  }
  return PNG.sync.write(png);
}

/**
 * A chat model for the stage tests: text facts from the built-in rule-based extractor, image
 * facts that restate an image's caption and alt text (what a text-only model can honestly say),
 * and a record of every call with the concurrency it ran at.
 */
export function recordingChatModel(options: { canSeeImages?: boolean; delayMs?: number } = {}) {
  const text = createLocalFactExtractor();
  const imageCalls: ImageInput[] = [];
  const chunkCalls: number[] = [];
  let inFlightText = 0;
  let inFlightImages = 0;
  const peaks = { text: 0, image: 0 };
  const pause = () => new Promise((resolve) => setTimeout(resolve, options.delayMs ?? 0));
  const model: ChatModel = {
    modelId: 'test/recording-chat',
    canSeeImages: options.canSeeImages ?? true,
    async extractFacts(input, signal) {
      chunkCalls.push(input.chunkIndex);
      inFlightText += 1;
      peaks.text = Math.max(peaks.text, inFlightText);
      try {
        // Later chunks answer sooner, so a pool that kept completion order would scramble the facts.
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, (options.delayMs ?? 0) * (4 - (input.chunkIndex % 4)))));
        return await text.extractFacts(input, signal);
      } finally {
        inFlightText -= 1;
      }
    },
    async extractImageFacts(input) {
      imageCalls.push(input);
      inFlightImages += 1;
      peaks.image = Math.max(peaks.image, inFlightImages);
      try {
        await pause();
        const facts: ExtractedFact[] = [];
        if (input.caption) facts.push({ content: `The source has a figure captioned "${input.caption}".`, sourceText: input.caption });
        if (input.altText) facts.push({ content: `An image of the source shows ${input.altText}.`, sourceText: input.altText });
        if (facts.length === 0) facts.push({ content: `The source has an image of ${input.bytes.length} bytes.`, sourceText: '' });
        return facts;
      } finally {
        inFlightImages -= 1;
      }
    },
    async extractConcepts() {
      return [];
    },
    async refineConcepts() {
      return [];
    },
    async judgePostures() {
      return [];
    },
    // Decomposition never summarises: the built-in model's answers stand in.
    summarizeFacts: async (input) => localSliceSummary(input),
    synthesizeConcept: async (input) => localSynthesis(input),
  };
  return { model, imageCalls, chunkCalls, peaks };
}
