import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { handleCommand, loadState } from '../../eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { AssetStore } from '../../storage/assets.js';
import { extractDocument } from '../../providers/fetch/extract.js';
import { doiToUrl } from '../../providers/fetch/doi.js';
import type { FetchedResource } from '../../providers/fetch/http.js';
import { PermanentJobError, type JobContext, type Stage } from '../types.js';
import { recordingSourceFailure, sourceSubject, stageMetadata } from './common.js';

export interface RetrieveSourceDeps {
  store: EventStore;
  assets: AssetStore;
  fetcher: { fetch(url: string, signal?: AbortSignal): Promise<FetchedResource> };
  doiResolver: string;
  /** Attempts the runtime makes before giving up; on the last one a failure is recorded on the source. */
  maxAttempts: number;
}

/**
 * retrieve_source: fetch the source's body (or read the uploaded one), extract its text and
 * Markdown, store all three as blobs and record SourceFetched. Never runs on replay: the result
 * is in the event.
 */
export function createRetrieveSourceStage(deps: RetrieveSourceDeps): Stage {
  return {
    kind: 'retrieve_source',
    triggers: ['SourceRegistered', 'SourceRetryRequested'],
    subjectOf: sourceSubject,
    async run(context: JobContext) {
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const metadata = stageMetadata(context);
      const { state } = await loadState(deps.store, stream, sourceDecider);
      // Only a source still waiting for its body is ours; anything else was done by a twin or a retry.
      if (state.status !== 'pending' && state.status !== 'fetching') return;
      const registered = await firstEvent(deps.store, stream);
      await handleCommand(deps.store, stream, sourceDecider, { type: 'StartFetch' }, metadata, { retries: 0 });
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'retrieve_source', maxAttempts: deps.maxAttempts }, async () => {
        const resource = await obtainBody(registered.data, context.signal);
        const document = await extractDocument({
          body: resource.body,
          contentType: resource.contentType ?? undefined,
          url: resource.finalUrl ?? undefined,
          filename: registered.data.filename ?? undefined,
        });
        const [body, text, markdown] = await Promise.all([
          deps.assets.put(resource.body),
          deps.assets.put(document.text),
          deps.assets.put(document.markdown),
        ]);
        await handleCommand(
          deps.store,
          stream,
          sourceDecider,
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
            },
          },
          metadata,
          { retries: 0 },
        );
      });
    },
  };

  async function obtainBody(
    registered: Extract<SourceEvent, { type: 'SourceRegistered' }>['data'],
    signal: AbortSignal,
  ): Promise<{ body: Buffer; contentType: string | null; finalUrl: string | null }> {
    if (registered.origin === 'upload') {
      if (!registered.body_sha256) throw new PermanentJobError('upload has no stored body');
      return {
        body: await deps.assets.get(registered.body_sha256),
        contentType: registered.content_type ?? 'application/octet-stream',
        finalUrl: null,
      };
    }
    const url = registered.origin === 'doi' ? doiToUrl(registered.doi ?? '', deps.doiResolver) : registered.url ?? '';
    const fetched = await deps.fetcher.fetch(url, signal);
    return { body: fetched.body, contentType: fetched.contentType, finalUrl: fetched.finalUrl };
  }
}

async function firstEvent(store: EventStore, stream: string) {
  const [registered] = await store.readStream(stream, { limit: 1 });
  if (!registered || registered.type !== 'SourceRegistered') throw new PermanentJobError(`${stream} has no SourceRegistered event`);
  return registered as RecordedEvent<'SourceRegistered', Extract<SourceEvent, { type: 'SourceRegistered' }>['data']>;
}
