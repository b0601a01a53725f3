import { randomUUID } from 'node:crypto';
import { withNamedLock } from '../db/namedLock.js';
import { sourceDecider, type SourceEvent } from '../domain/source/decider.js';
import { normalizeReference, referenceKey, type SourceReference } from '../domain/source/reference.js';
import { streamName, type EventMetadata } from '../eventstore/envelope.js';
import { addressPolicyFromConfig, RefusedAddressError } from '../providers/fetch/addressPolicy.js';
import { looksBinary, parseContentType, startsWithPdfMagic } from '../providers/fetch/sniff.js';
import type { Principal } from '../auth/rbac.js';
import { loadSource } from '../read/sources.js';
import { isSuperseded } from '../pipeline/jobs.js';
import { presentSource, type SourceRow } from '../read/present.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, invalid, notFound, ReadModelsBehindError, UnsupportedContentError } from './errors.js';
import { settleWaitMs } from './commands.js';
import { registeredSourceRow } from '../../projections/sources.js';

const UPLOAD_TYPES: Record<string, string> = {
  '.html': 'text/html',
  '.htm': 'text/html',
  '.pdf': 'application/pdf',
  '.md': 'text/markdown',
  '.markdown': 'text/markdown',
  '.txt': 'text/plain',
};
const ACCEPTED_UPLOAD_TYPES = new Set(['text/html', 'application/pdf', 'text/markdown', 'text/x-markdown', 'text/plain']);

/** An uploaded document: its name, the media type the sender declared, and its bytes. */
export interface UploadedContent {
  filename: string | null;
  declaredType: string | null;
  body: Buffer;
  /** The bytes' SHA-256 (hex) when reading the upload computed it (a keyed upload's fingerprint names the file by it), for the asset store not to hash them again. */
  sha256?: string;
}

/** What an upload route reads: the media types it takes as declared, by file extension, and what to say when neither fits. */
export interface UploadKinds {
  /** `upload` or `report`, as the refusal names it. */
  noun: string;
  accepted: ReadonlySet<string>;
  byExtension: Readonly<Record<string, string>>;
  advice: string;
}

/**
 * The media type an upload is read as: the declared one when the route takes it, else the one of
 * its file extension; refused (415) when neither names one.
 */
export function uploadedMediaType(content: Pick<UploadedContent, 'filename' | 'declaredType'>, kinds: UploadKinds): { mediaType: string; declaredCharset: string | null } {
  const extension = (/\.[a-z0-9]+$/i.exec(content.filename ?? '')?.[0] ?? '').toLowerCase();
  const { mime, charset } = parseContentType(content.declaredType);
  const declared = mime ?? '';
  const mediaType = kinds.accepted.has(declared) ? declared : kinds.byExtension[extension];
  if (!mediaType) throw new UnsupportedContentError(`unsupported ${kinds.noun} type '${declared || extension || 'unknown'}': ${kinds.advice}`);
  return { mediaType, declaredCharset: charset };
}

const SOURCE_UPLOADS: UploadKinds = { noun: 'upload', accepted: ACCEPTED_UPLOAD_TYPES, byExtension: UPLOAD_TYPES, advice: 'use HTML, PDF, Markdown or plain text' };

/** The content type of an upload: the declared one when the pipeline reads it, else by the file extension. */
export function uploadContentType(content: Pick<UploadedContent, 'filename' | 'declaredType'>): string {
  const { mediaType: contentType, declaredCharset } = uploadedMediaType(content, SOURCE_UPLOADS);
  // The charset a text upload declares is the one it is read in (kept on the source's content type).
  const charset = declaredCharset !== null && /^[a-z0-9_:.-]+$/i.test(declaredCharset) ? declaredCharset.toLowerCase() : null;
  return charset && contentType !== 'application/pdf' ? `${contentType}; charset=${charset}` : contentType;
}

/**
 * A URL whose host is a literal IP the outbound policy refuses is a 400 at once; host names are
 * checked when fetched (they may resolve differently then), failing the source with the reason.
 */
function refuseUnreachableHost(url: string, config: AppContext['config']): void {
  try {
    addressPolicyFromConfig(config).assertUrlHost(new URL(url));
  } catch (error) {
    if (error instanceof RefusedAddressError) throw invalid(`url is refused: ${error.message}`);
    throw error;
  }
}

/**
 * Runs `work` while no other deletion, retry (of the source or of one of its tasks) or investigation link of the source runs (across
 * processes on a server). Each reads the source and appends on its own stream or another's, so
 * side by side a retry could record its SourceRetryRequested and then answer 404 for the source
 * deleted after it, and a link appended after the deletion outlived it in the investigation
 * (InvestigationSourceAdded on the investigation's stream, after SourceDeleted had cleared the
 * source's links) while the caller was told it was added.
 */
export function withSourceLock<T>(db: AppContext['db'], sourceId: string, work: () => Promise<T>): Promise<T> {
  return withNamedLock(db, `factlog.source.${sourceId}`, work, 'exclusive', ['sources']);
}

/** Source commands: add by URL, DOI or upload (duplicates of a URL or DOI return the existing source), and retry. */
export function sourceCommands(deps: Pick<AppContext, 'db' | 'commands' | 'assets' | 'jobs' | 'config' | 'wakeWorkers' | 'store' | 'projections'>) {
  const knex = deps.db.knex;

  async function register(repositoryId: string, command: Parameters<typeof sourceDecider.decide>[0], metadata: EventMetadata) {
    const sourceId = randomUUID();
    const streamId = streamName('source', sourceId);
    await deps.commands.execute(streamId, sourceDecider, command, metadata, { newStream: true });
    const row: SourceRow | undefined = await knex('sources').where({ id: sourceId, repository_id: repositoryId }).first();
    if (row) return presentSource(row);
    // The read model lags past the command's wait (or is stopped): the source is registered all
    // the same, so it is answered as its registration made it, not as a 404. The next add of this
    // URL or DOI waits for it under the reference's lock (src/app/lockMarks.ts).
    const [registered] = await deps.store.readStream(streamId, { limit: 1 });
    if (registered?.type !== 'SourceRegistered') throw notFound('source');
    // Validated against its schema when it was appended.
    const data = registered.data as Extract<SourceEvent, { type: 'SourceRegistered' }>['data'];
    const projected = registeredSourceRow({ ...registered, type: 'SourceRegistered', data });
    return presentSource({ title: null, failure: null, published_at: null, final_url: null, model_id: null, fact_count: 0, document_kind: null, ...projected, repository_id: repositoryId });
  }

  /**
   * Throws ReadModelsBehindError while the `sources` read model is being rebuilt (which empties
   * it first): it cannot say then whether the repository has a reference. A registration an
   * earlier add answered before the read model had it is waited for by the reference's lock
   * (src/app/lockMarks.ts), so an add does not wait for the log's head, which the pipeline keeps
   * moving.
   */
  async function sourcesNotRebuilding(what: string): Promise<void> {
    if (!(await deps.projections.projectionReached('sources', 0, settleWaitMs(deps.config.server)))) throw new ReadModelsBehindError(['sources'], what);
  }

  /**
   * The repository's source of a normalised URL or DOI, if it has one: by its reference key, which
   * the sources projection computes from each SourceRegistered with the same rules, so a source an
   * older release stored under another spelling (`page?`, `%6b`, a #fragment, a doi.org URL) is found.
   */
  async function findByReference(repositoryId: string, reference: SourceReference) {
    const existing: SourceRow | undefined = await knex('sources').where({ repository_id: repositoryId, reference_key: referenceKey(reference) }).orderBy(['created_at', 'id']).first();
    return existing === undefined ? null : presentSource(existing);
  }

  return {
    /**
     * The repository's source of a URL or DOI, or null: what `add` would answer without adding.
     * Access is the caller's to check (an investigation takes a known source with its own).
     */
    async find(repositoryId: string, input: { url?: string; doi?: string }) {
      return findByReference(repositoryId, normalizeReference(input));
    },

    /** Adds a URL or a DOI; `created` is false when the repository already had it (the existing source is answered). */
    async add(principal: Principal, input: { repository: string; url?: string; doi?: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:create');
      const reference = normalizeReference(input);
      if (reference.url) refuseUnreachableHost(reference.url, deps.config);
      // Look up and register as one step per reference: two requests adding the same URL at once
      // must not both find it missing (the second waits and then finds the first's source). The
      // lock is named by the reference key: one lock for every spelling of one document.
      const lock = `factlog.source-reference.${repository.id}.${referenceKey(reference)}`;
      const addOnce = async () => {
        await sourcesNotRebuilding('the repository has this URL or DOI');
        const existing = await findByReference(repository.id, reference);
        if (existing) return { created: false, source: existing };
        const source = await register(
          repository.id,
          { type: 'RegisterSource', origin: reference.url ? 'url' : 'doi', url: reference.url, doi: reference.doi },
          commandMetadata(principal, repository.id, trace),
        );
        return { created: true, source };
      };
      return withNamedLock(deps.db, lock, addOnce, 'exclusive', ['sources']);
    },

    /**
     * Adds an uploaded document. `content` is read only once the caller may add sources, so a
     * refused upload is never buffered.
     */
    async upload(principal: Principal, input: { repository: string; content: () => Promise<UploadedContent> }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:create');
      const { filename, declaredType, body, sha256 } = await input.content();
      if (body.length === 0) throw invalid('the uploaded file is empty');
      const contentType = uploadContentType({ filename, declaredType });
      // Refused now rather than failed later (or read as replacement characters): the sender is here to be told.
      if (contentType !== 'application/pdf' && looksBinary(body)) throw new UnsupportedContentError(`the uploaded file is binary data, not ${contentType} text`);
      if (contentType === 'application/pdf' && !startsWithPdfMagic(body)) throw new UnsupportedContentError('the uploaded file is not a PDF: no %PDF- header in its first kilobyte');
      const stored = await deps.assets.put(body, sha256);
      return register(
        repository.id,
        { type: 'RegisterSource', origin: 'upload', filename, contentType, bodySha256: stored.sha256, bodyBytes: stored.bytes },
        commandMetadata(principal, repository.id, trace),
      );
    },

    /**
     * Retries a source: a failed source (fetch or decomposition failed) starts over; a source
     * whose later tasks (embedding, dedup, concepts) failed has those tasks re-queued.
     */
    async retry(principal: Principal, input: { repository: string; source: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:write');
      return withSourceLock(deps.db, input.source, async () => {
        const source = await loadSource(knex, repository.id, input.source);
        if (source.status !== 'failed') {
          const { jobs } = await deps.jobs.list({ repositoryId: repository.id, sourceId: input.source, limit: 1000 });
          // A failed task that a later one of its kind took over (the source started over since) stays as it was.
          const retryable = jobs.filter((job) => (job.state === 'failed' || job.state === 'dead') && !isSuperseded(job, jobs));
          const nothingToRetry = () => conflict(`source is ${source.status} and none of its tasks failed: nothing to retry`);
          if (retryable.length === 0) throw nothingToRetry();
          // A retry sent beside this one may have re-queued them since they were listed: then it did what this one asks.
          let requeued = 0;
          for (const job of retryable) if ((await deps.jobs.retry(job.id)).status === 'requeued') requeued += 1;
          if (requeued === 0) throw nothingToRetry();
          deps.wakeWorkers();
          return presentSource(source);
        }
        await deps.commands.execute(streamName('source', input.source), sourceDecider, { type: 'RetrySource' }, commandMetadata(principal, repository.id, trace));
        return presentSource(await loadSource(knex, repository.id, input.source));
      });
    },

    /**
     * Deletes a source: it leaves every read and every investigation at once; cleanup_facts then
     * retracts the facts no other source has (FactRetracted), and what was derived from them is
     * re-made. Its stream stays, with `reason`, for audit.
     */
    async remove(principal: Principal, input: { repository: string; source: string; reason?: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:delete');
      const reason = input.reason?.trim() || undefined;
      await withSourceLock(deps.db, input.source, async () => {
        await loadSource(knex, repository.id, input.source);
        const { write } = await deps.commands.execute(streamName('source', input.source), sourceDecider, { type: 'DeleteSource', reason }, commandMetadata(principal, repository.id, trace));
        // Nothing appended: another call deleted it since it was loaded, and a deleted source is not found.
        if (write === null) throw notFound('source');
      });
    },
  };
}
