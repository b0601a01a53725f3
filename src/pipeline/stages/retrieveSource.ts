import { sourceDecider, type SourceEvent, type SourceImage } from '../../domain/source/decider.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { AssetStore } from '../../storage/assets.js';
import type { ExtractedDocument } from '../../providers/fetch/extract.js';
import { inThreadDocumentExtractor, type DocumentExtractor } from '../../providers/fetch/extractionWorkers.js';
import { doiToUrl } from '../../providers/fetch/doi.js';
import { addressPolicyFromConfig } from '../../providers/fetch/addressPolicy.js';
import { createHttpFetcher, FetchError, fetchSettingsFromConfig, type AutoSkipSettings, type FetchedResource } from '../../providers/fetch/http.js';
import { AUTO_SKIP_REASON_PREFIX, autoSkipDecision, createHostHealthReader, hostOfUrl, type HostHealthReader } from '../../providers/fetch/hostHealth.js';
import {
  collectSourceImages,
  DEFAULT_IMAGE_LIMITS,
  imageFetchSettings,
  imageIdFor,
  type ImageFetcher,
  type ImageLimits,
  type SourceImage as CollectedImage,
} from '../../providers/fetch/images.js';
import { PermanentJobError, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { Semaphore } from '../../util/concurrency.js';
import { commandFrom, failSourceOfDeadJob, loadStream, recordingSourceFailure, runSideBySide, sourceSubject, stageMetadata } from './common.js';

export interface RetrieveSourceDeps {
  store: EventStore;
  assets: AssetStore;
  fetcher: { fetch(url: string, signal?: AbortSignal): Promise<FetchedResource> };
  doiResolver: string;
  /** Extracts text, Markdown, image references and a PDF's images; default on the calling thread (the service passes its worker threads). */
  documents?: DocumentExtractor;
  /** Attempts the runtime makes before giving up; on the last one a failure is recorded on the source. */
  maxAttempts: number;
  /**
   * Fetches the images a page references. Default: `fetcher`. Best built with the same settings
   * and `maxBodyBytes` = `max_image_bytes`, so an oversized image is not downloaded whole.
   */
  imageFetcher?: ImageFetcher;
  /** `providers.decomposition.image_extraction`; default 5 MiB and 20 per source. */
  images?: ImageLimits;
  /** Per-host auto-skip (`providers.resolution.auto_skip`) over the `host_health` read model; none: never skip. */
  hostHealth?: { reader: HostHealthReader; settings: AutoSkipSettings } | null;
  /** Epoch milliseconds, for the auto-skip cooldown. */
  now?: () => number;
  /**
   * Sources fetched at once by this process, over all its groups (`task.queues.retrieve_source`):
   * a worker runs a group of jobs, and their fetches share these places. Default 20.
   */
  fetchesAtOnce?: number;
}

type Registered = Extract<SourceEvent, { type: 'SourceRegistered' }>['data'];

/**
 * retrieve_source: fetch the source's body (or read the uploaded one), extract its text,
 * Markdown and images, store them all as blobs and record SourceFetched. A URL source whose
 * host auto-skip has closed is failed without a fetch. Never runs on replay: the result is in
 * the event.
 */
export function createRetrieveSourceStage(deps: RetrieveSourceDeps): Stage {
  const imageLimits = deps.images ?? DEFAULT_IMAGE_LIMITS;
  const documents = deps.documents ?? inThreadDocumentExtractor;
  const now = deps.now ?? Date.now;
  const fetchPlaces = new Semaphore(deps.fetchesAtOnce ?? 20);
  const stage: Stage = {
    kind: 'retrieve_source',
    onDead: failSourceOfDeadJob(deps.store, 'retrieve_source'),
    triggers: ['SourceRegistered', 'SourceRetryRequested'],
    subjectOf: sourceSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    async run(context: JobContext) {
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const metadata = stageMetadata(context);
      const loaded = await loadStream(deps.store, stream, sourceDecider);
      // Only a source still waiting for its body is ours; anything else was done by a twin or a retry.
      if ((loaded.state.status !== 'pending' && loaded.state.status !== 'fetching') || loaded.state.deleted) return;
      const registered = firstEvent(loaded.events, stream);
      const { after: started } = await commandFrom(deps.store, stream, sourceDecider, loaded, { type: 'StartFetch' }, metadata, { retries: 0 });
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'retrieve_source', maxAttempts: deps.maxAttempts }, async () => {
        await refuseSkippedHost(registered.data);
        const { resource, document, body, text, markdown, images } = await fetchPlaces.run(async () => {
          const resource = await obtainBody(registered.data, context.signal);
          const document = await documents.extract(
            {
              body: resource.body,
              contentType: resource.contentType ?? undefined,
              url: resource.finalUrl ?? undefined,
              filename: registered.data.filename ?? undefined,
            },
            context.signal,
          );
          // One after the other: text and Markdown are often the same bytes, and two concurrent
          // puts of one blob race on its temporary file in the asset store.
          const body = await deps.assets.put(resource.body);
          const text = await deps.assets.put(document.text);
          const markdown = await deps.assets.put(document.markdown);
          const images = await storeImages(resource.body, document, context.signal);
          return { resource, document, body, text, markdown, images };
        });
        await commandFrom(
          deps.store,
          stream,
          sourceDecider,
          started,
          {
            type: 'RecordFetch',
            fetched: {
              final_url: resource.finalUrl,
              content_type: resource.contentType ?? 'application/octet-stream',
              body_sha256: body.sha256,
              body_bytes: body.bytes,
              document_kind: document.kind,
              title: document.title,
              published_at: document.publishedAt,
              text_sha256: text.sha256,
              markdown_sha256: markdown.sha256,
              text_chars: document.text.length,
              images,
            },
          },
          metadata,
          { retries: 0 },
        );
      });
    },
    // A worker takes a group of sources: their reads and appends go together where the store
    // coalesces them, while their fetches share the process's places (fetchesAtOnce).
    runMany: (contexts) => runSideBySide(stage, contexts, contexts.map((context) => streamName('source', context.job.subjectId))),
  };
  return stage;

  /** The host auto-skip is about: a URL source's own host (a DOI goes through the resolver to many publishers). */
  function skipHostOf(registered: Registered): string | null {
    return registered.origin === 'url' ? hostOfUrl(registered.url) : null;
  }

  async function refuseSkippedHost(registered: Registered): Promise<void> {
    if (!deps.hostHealth?.settings.enabled) return;
    const host = skipHostOf(registered);
    if (!host) return;
    const decision = autoSkipDecision(await deps.hostHealth.reader.get(host), deps.hostHealth.settings, now());
    if (decision) throw new PermanentJobError(decision.reason);
  }

  /** The images of the document, stored as blobs; images are extras, so their failure never fails the source. */
  async function storeImages(body: Buffer, document: ExtractedDocument, signal: AbortSignal): Promise<SourceImage[]> {
    let collected: CollectedImage[];
    try {
      collected = await collectSourceImages({
        kind: document.kind,
        body,
        images: document.images,
        limits: imageLimits,
        fetcher: deps.imageFetcher ?? deps.fetcher,
        pdfImages: (body, limits, abort) => documents.pdfImages(body, limits, abort),
        signal,
      });
    } catch (error) {
      if (signal.aborted) throw error;
      return [];
    }
    const stored: SourceImage[] = [];
    for (const [position, image] of collected.entries()) {
      const blob = await deps.assets.put(image.bytes);
      stored.push({
        image_id: imageIdFor(position, blob.sha256),
        sha256: blob.sha256,
        content_type: image.contentType,
        bytes: blob.bytes,
        url: image.url,
        alt_text: image.altText,
        caption: image.caption,
      });
    }
    return stored;
  }

  async function obtainBody(registered: Registered, signal: AbortSignal): Promise<{ body: Buffer; contentType: string | null; finalUrl: string | null }> {
    if (registered.origin === 'upload') {
      if (!registered.body_sha256) throw new PermanentJobError('upload has no stored body');
      return {
        body: await deps.assets.get(registered.body_sha256),
        contentType: registered.content_type ?? 'application/octet-stream',
        finalUrl: null,
      };
    }
    const url = registered.origin === 'doi' ? doiToUrl(registered.doi ?? '', deps.doiResolver) : registered.url ?? '';
    try {
      const fetched = await deps.fetcher.fetch(url, signal);
      return { body: fetched.body, contentType: fetched.contentType, finalUrl: fetched.finalUrl };
    } catch (error) {
      // The fetcher's own in-process skip is a skip too: recorded as one, so it does not count as a host failure.
      if (error instanceof FetchError && error.reason === 'host auto-skipped') {
        throw new PermanentJobError(`${AUTO_SKIP_REASON_PREFIX} ${error.message}`);
      }
      // The fetcher retried already (providers.resolution.retry: 3 attempts, 2 on a 403): its last
      // failure ends the source. Handed back to the job's own retries (task.retry, 5), each of
      // those repeated all of the fetcher's: 15 requests to a failing page, and a host that never
      // answers held its source `fetching` for a quarter of an hour (QA). A crash mid-fetch still
      // re-runs the job.
      if (error instanceof FetchError && !error.permanent && error.attempts > 0 && error.reason !== 'aborted') throw new PermanentJobError(error.message, { cause: error });
      throw error;
    }
  }
}

function firstEvent(events: readonly RecordedEvent[], stream: string) {
  const [registered] = events;
  if (!registered || registered.type !== 'SourceRegistered') throw new PermanentJobError(`${stream} has no SourceRegistered event`);
  return registered as RecordedEvent<'SourceRegistered', Registered>;
}

/** The registry's entry: fetch settings from `providers.resolution`, image limits from `image_extraction`. */
export const retrieveSourceStage: StageDefinition = {
  kind: 'retrieve_source',
  enabled: () => true,
  create: ({ config, store, assets, knex, documents }) => {
    const fetchSettings = fetchSettingsFromConfig(config.providers.resolution);
    const { image_extraction } = config.providers.decomposition;
    // One policy for the document and its images: both are URLs a user chose.
    const addressPolicy = addressPolicyFromConfig(config);
    const images = { maxImageBytes: image_extraction.max_image_bytes, maxImagesPerSource: image_extraction.max_images_per_source };
    return createRetrieveSourceStage({
      store,
      assets,
      fetcher: createHttpFetcher(fetchSettings, { addressPolicy }),
      imageFetcher: createHttpFetcher(imageFetchSettings(fetchSettings, images), { addressPolicy }),
      images,
      hostHealth: { reader: createHostHealthReader(knex), settings: fetchSettings.autoSkip },
      doiResolver: config.providers.resolution.doi_resolver,
      documents,
      maxAttempts: config.task.retry.max_attempts,
      fetchesAtOnce: config.task.queues.retrieve_source,
    });
  },
};
