import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { pipeline, type Readable } from 'node:stream';
import { setTimeout as sleepTimer } from 'node:timers/promises';
import zlib from 'node:zlib';

import { parseDuration } from '../../config/duration.js';
import type { Config } from '../../config/types.js';
import { parseRetryAfter } from '../../util/retryAfter.js';
import { RefusedAddressError, type AddressPolicy } from './addressPolicy.js';
import { errorMessage } from '../../util/errorMessage.js';

export interface AutoSkipSettings {
  enabled: boolean;
  /** Outcomes (the most recent ones) a host needs before it can be skipped. */
  minSample: number;
  /** Failure ratio over those outcomes at or above which the host is skipped. */
  failureThreshold: number;
  cooldownMs: number;
}

export interface FetchSettings {
  /** Limit for one attempt, redirects and body included. */
  timeoutMs: number;
  /** Attempts for transient failures, including the first. */
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** Total attempts when the answer is 403; 0 makes a 403 permanent at once. */
  retry403MaxAttempts: number;
  maxBodyBytes: number;
  userAgent: string;
  autoSkip: AutoSkipSettings;
}

/** The spec's `providers.resolution` defaults. */
export const DEFAULT_FETCH_SETTINGS: Readonly<FetchSettings> = Object.freeze({
  timeoutMs: 60_000,
  maxAttempts: 3,
  baseDelayMs: 2_000,
  maxDelayMs: 15_000,
  retry403MaxAttempts: 2,
  maxBodyBytes: 50 * 1024 * 1024,
  userAgent: 'factlog/0.1 (+https://factlog.invalid)',
  autoSkip: Object.freeze({ enabled: true, minSample: 100, failureThreshold: 0.85, cooldownMs: 24 * 3_600_000 }),
});

/** Maps the `providers.resolution` configuration section onto fetch settings. */
export function fetchSettingsFromConfig(resolution: Config['providers']['resolution']): FetchSettings {
  return {
    timeoutMs: parseDuration(resolution.fetch.timeout),
    maxAttempts: resolution.retry.max_attempts,
    baseDelayMs: parseDuration(resolution.retry.base_delay),
    maxDelayMs: parseDuration(resolution.retry.max_delay),
    retry403MaxAttempts: resolution.retry.retry_403_max_attempts,
    maxBodyBytes: resolution.fetch.max_body_bytes,
    userAgent: resolution.fetch.user_agent,
    autoSkip: {
      enabled: resolution.auto_skip.enabled,
      minSample: resolution.auto_skip.min_sample,
      failureThreshold: resolution.auto_skip.failure_threshold,
      cooldownMs: parseDuration(resolution.auto_skip.cooldown),
    },
  };
}

export interface FetchedResource {
  /** The URL that was asked for. */
  url: string;
  /** The URL that answered, after redirects. */
  finalUrl: string;
  status: number;
  /** The Content-Type header as sent (parameters included), or null when absent. */
  contentType: string | null;
  body: Buffer;
  /** Hex SHA-256 of body. */
  sha256: string;
  /** ISO 8601 time the body was received. */
  fetchedAt: string;
}

export interface HostStats {
  host: string;
  /** Totals since the fetcher was created. */
  successes: number;
  failures: number;
  /** Outcomes in the auto-skip window (the most recent `minSample` fetches) and failures among them. */
  recentOutcomes: number;
  recentFailures: number;
  /** Epoch milliseconds until which fetches to the host fail at once; null when not skipped. */
  skippedUntil: number | null;
}

export interface FetcherDeps {
  /** Waits between attempts; rejects when the signal aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Epoch milliseconds; drives fetchedAt, Retry-After dates and auto-skip cooldowns. */
  now?: () => number;
  /** In [0, 1); drives backoff jitter. */
  random?: () => number;
  /**
   * Which addresses may be connected to, checked on every resolved address and on every redirect
   * (the service wires `addressPolicyFromConfig`); without one every address is reachable.
   */
  addressPolicy?: AddressPolicy;
}

export interface HttpFetcher {
  fetch(url: string, signal?: AbortSignal): Promise<FetchedResource>;
  /** Accepts a host (`example.com`, `example.com:8080`) or any URL on it. */
  hostStats(host: string): HostStats;
}

export interface FetchErrorInit {
  url: string;
  permanent: boolean;
  reason: string;
  attempts: number;
  status?: number;
  /** The system error code of a network failure (ECONNRESET, ...). */
  code?: string;
  detail?: string;
  cause?: unknown;
}

/** How a FetchError's message names the kind of its failure: `(transient, http 503, 3 attempts)`. */
const failureKind = (permanent: boolean) => `(${permanent ? 'permanent' : 'transient'}, `;

/**
 * Whether a failure reason recorded from a FetchError's message (a SourceFailed's, where only the
 * text is kept) is of a transient failure: no answer, a timeout, a 5xx or 429 through every retry.
 */
export function isTransientFetchFailure(reason: string): boolean {
  return reason.includes(failureKind(false));
}

/**
 * A fetch that did not produce a body. `permanent` says whether trying again later can help:
 * a transient failure whose attempts ran out is still `permanent: false`, so the job layer may
 * retry it later; a caller abort is also `permanent: false` (reason 'aborted').
 */
export class FetchError extends Error {
  override readonly name = 'FetchError';
  readonly url: string;
  readonly permanent: boolean;
  readonly reason: string;
  readonly attempts: number;
  readonly status?: number;
  readonly code?: string;

  constructor(init: FetchErrorInit) {
    const tries = `${init.attempts} attempt${init.attempts === 1 ? '' : 's'}`;
    super(
      `fetching ${init.url} failed ${failureKind(init.permanent)}${init.reason}, ${tries})${init.detail ? `: ${init.detail}` : ''}`,
      init.cause === undefined ? undefined : { cause: init.cause },
    );
    this.url = init.url;
    this.permanent = init.permanent;
    this.reason = init.reason;
    this.attempts = init.attempts;
    if (init.status !== undefined) this.status = init.status;
    if (init.code !== undefined) this.code = init.code;
  }
}

const MAX_REDIRECTS = 10;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

// Failures that say nothing about whether the same request works later.
const TRANSIENT_NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ERR_STREAM_PREMATURE_CLOSE',
  'Z_BUF_ERROR', // a compressed body cut short by a dropped connection
]);

// A certificate problem or a malformed answer will not fix itself between two attempts.
const PERMANENT_NETWORK_CODES = new Set([
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'Z_DATA_ERROR',
]);

interface AttemptFailureInit {
  permanent: boolean;
  reason: string;
  status?: number;
  code?: string;
  detail?: string;
  /** Delay the server asked for (Retry-After), already capped. */
  retryAfterMs?: number;
  cause?: unknown;
}

/** Why one attempt failed; the retry loop turns the last one into a FetchError. */
class AttemptFailure extends Error {
  constructor(readonly failure: AttemptFailureInit) {
    super(failure.detail ?? failure.reason);
  }
}

interface AttemptResult {
  finalUrl: string;
  status: number;
  contentType: string | null;
  body: Buffer;
}

interface HostRecord {
  successes: number;
  failures: number;
  /** Most recent outcomes, oldest first; true is a failure. At most minSample long. */
  recent: boolean[];
  skippedUntil: number | null;
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return sleepTimer(ms, undefined, signal ? { signal } : undefined);
}

function isHttpUrl(url: URL): boolean {
  return url.protocol === 'http:' || url.protocol === 'https:';
}

function hostKey(hostOrUrl: string): string {
  if (hostOrUrl.includes('://')) {
    try {
      return new URL(hostOrUrl).host.toLowerCase();
    } catch {
      // Not a URL after all: use the text as the host name.
    }
  }
  return hostOrUrl.trim().toLowerCase();
}

function errorCode(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string') {
    return error.code;
  }
  return undefined;
}

function classifyNetworkError(error: unknown): AttemptFailureInit {
  const code = errorCode(error);
  const detail = `${code ?? 'network error'}: ${errorMessage(error)}`;
  if (code !== undefined && (PERMANENT_NETWORK_CODES.has(code) || code.startsWith('HPE_'))) {
    return { permanent: true, reason: code.startsWith('Z_') ? 'invalid body encoding' : 'invalid response', code, detail, cause: error };
  }
  // Unknown codes count as transient too: a flaky network is the common cause, and the
  // attempt limit bounds the cost of being wrong.
  const known = code !== undefined && TRANSIENT_NETWORK_CODES.has(code);
  return { permanent: false, reason: 'network error', ...(code ? { code } : {}), detail: known ? detail : `unclassified ${detail}`, cause: error };
}

function createDecoder(contentEncoding: string | undefined): zlib.Gunzip | zlib.Inflate | zlib.BrotliDecompress | null {
  const encoding = (contentEncoding ?? '').trim().toLowerCase();
  switch (encoding) {
    case '':
    case 'identity':
      return null;
    case 'gzip':
    case 'x-gzip':
      return zlib.createGunzip();
    case 'deflate':
      return zlib.createInflate();
    case 'br':
      return zlib.createBrotliDecompress();
    default:
      throw new AttemptFailure({ permanent: true, reason: 'unsupported content-encoding', detail: `content-encoding ${encoding}` });
  }
}

export function createHttpFetcher(settings: FetchSettings, deps: FetcherDeps = {}): HttpFetcher {
  const sleep = deps.sleep ?? defaultSleep;
  const now = deps.now ?? Date.now;
  const random = deps.random ?? Math.random;
  const maxAttempts = Math.max(1, Math.floor(settings.maxAttempts));
  const retry403MaxAttempts = Math.max(0, Math.floor(settings.retry403MaxAttempts));
  const hosts = new Map<string, HostRecord>();

  const requestHeaders = {
    'user-agent': settings.userAgent,
    accept: 'text/html,application/xhtml+xml,application/pdf;q=0.9,text/markdown;q=0.9,text/plain;q=0.8,*/*;q=0.5',
    'accept-encoding': 'gzip, deflate, br',
  };

  function hostRecord(host: string): HostRecord {
    let record = hosts.get(host);
    if (!record) {
      record = { successes: 0, failures: 0, recent: [], skippedUntil: null };
      hosts.set(host, record);
    }
    return record;
  }

  function recordOutcome(host: string, failed: boolean): void {
    const record = hostRecord(host);
    if (failed) record.failures += 1;
    else record.successes += 1;
    const windowSize = Math.max(1, settings.autoSkip.minSample);
    record.recent.push(failed);
    if (record.recent.length > windowSize) record.recent.splice(0, record.recent.length - windowSize);
    // Only a failure opens the skip. After a cooldown the old window is kept, so the next
    // fetch is a probe: one more failure skips the host again, successes wear the ratio down.
    if (!failed || !settings.autoSkip.enabled || record.recent.length < settings.autoSkip.minSample) return;
    const recentFailures = record.recent.filter(Boolean).length;
    if (recentFailures / record.recent.length >= settings.autoSkip.failureThreshold) {
      record.skippedUntil = now() + settings.autoSkip.cooldownMs;
    }
  }

  function activeSkipUntil(host: string): number | null {
    if (!settings.autoSkip.enabled) return null;
    const until = hosts.get(host)?.skippedUntil ?? null;
    return until !== null && now() < until ? until : null;
  }

  function backoffDelay(failedAttempt: number): number {
    const exponential = settings.baseDelayMs * 2 ** (failedAttempt - 1);
    const capped = Math.min(settings.maxDelayMs, exponential);
    // "Equal jitter": half fixed, half random, so delays still grow and never pass the cap.
    return Math.round(capped / 2 + (random() * capped) / 2);
  }

  function sendRequest(url: URL, signal: AbortSignal): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const client = url.protocol === 'https:' ? https : http;
      const policy = deps.addressPolicy;
      // A literal IP never reaches lookup: it is checked here, before any connection.
      policy?.assertUrlHost(url);
      const request = client.request(url, { method: 'GET', headers: requestHeaders, signal, ...(policy ? { lookup: policy.lookup } : {}) }, resolve);
      request.on('error', reject);
      request.end();
    });
  }

  async function readBody(response: http.IncomingMessage, signal: AbortSignal): Promise<Buffer> {
    const declaredLength = Number(response.headers['content-length']);
    if (Number.isFinite(declaredLength) && declaredLength > settings.maxBodyBytes) {
      response.destroy();
      throw new AttemptFailure({
        permanent: true,
        reason: 'body too large',
        detail: `Content-Length ${declaredLength} exceeds the limit of ${settings.maxBodyBytes} bytes`,
      });
    }
    let decoder: ReturnType<typeof createDecoder>;
    try {
      decoder = createDecoder(response.headers['content-encoding']);
    } catch (error) {
      response.destroy();
      throw error;
    }
    const stream: Readable = decoder ? pipeline(response, decoder, () => {}) : response;
    const stop = (): void => {
      stream.destroy(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      response.destroy();
    };
    if (signal.aborted) stop();
    signal.addEventListener('abort', stop, { once: true });
    const chunks: Buffer[] = [];
    let total = 0;
    try {
      for await (const chunk of stream) {
        const buffer = chunk as Buffer; // streams without an encoding yield Buffers
        total += buffer.length;
        if (total > settings.maxBodyBytes) {
          throw new AttemptFailure({
            permanent: true,
            reason: 'body too large',
            detail: `body exceeds the limit of ${settings.maxBodyBytes} bytes`,
          });
        }
        chunks.push(buffer);
      }
    } finally {
      signal.removeEventListener('abort', stop);
      if (total > settings.maxBodyBytes) response.destroy();
    }
    return Buffer.concat(chunks, total);
  }

  function statusFailure(status: number, response: http.IncomingMessage): AttemptFailure {
    const detail = `HTTP ${status}${response.statusMessage ? ` ${response.statusMessage}` : ''}`;
    const reason = `http ${status}`;
    if (status === 429 || status === 503) {
      const retryAfterMs = parseRetryAfter(response.headers['retry-after'], now());
      return new AttemptFailure({
        permanent: false,
        reason,
        status,
        detail,
        ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
      });
    }
    // 408 is the server giving up on a slow request: as transient as a timeout of ours.
    if (status >= 500 || status === 408) return new AttemptFailure({ permanent: false, reason, status, detail });
    if (status === 403) return new AttemptFailure({ permanent: retry403MaxAttempts === 0, reason, status, detail });
    return new AttemptFailure({ permanent: true, reason, status, detail });
  }

  /** One attempt: the request, its redirects and the body, under one abort signal. */
  async function attemptOnce(startUrl: URL, signal: AbortSignal): Promise<AttemptResult> {
    let current = startUrl;
    for (let redirects = 0; ; redirects += 1) {
      const response = await sendRequest(current, signal);
      const status = response.statusCode ?? 0;
      if (REDIRECT_STATUSES.has(status)) {
        // Not drained: a redirect whose body never ends was read forever after the fetch had moved
        // on (outside the attempt's timeout). Its connection is not reused, which costs a connect.
        response.destroy();
        const location = response.headers.location;
        if (!location) {
          throw new AttemptFailure({ permanent: true, reason: 'redirect without location', status, detail: `HTTP ${status} from ${current.href}` });
        }
        if (redirects >= MAX_REDIRECTS) {
          throw new AttemptFailure({ permanent: true, reason: 'too many redirects', status, detail: `more than ${MAX_REDIRECTS} redirects` });
        }
        let next: URL;
        try {
          next = new URL(location, current);
        } catch (error) {
          throw new AttemptFailure({ permanent: true, reason: 'invalid redirect', status, detail: `Location ${JSON.stringify(location)}`, cause: error });
        }
        if (!isHttpUrl(next)) {
          throw new AttemptFailure({ permanent: true, reason: 'unsupported scheme', status, detail: `redirect to ${next.protocol} URL ${next.href}` });
        }
        if (next.username || next.password) {
          // node would send them as Basic auth; and the URL would end up in the source's final_url and the logs.
          throw new AttemptFailure({ permanent: true, reason: 'invalid redirect', status, detail: `redirect to a URL with credentials on ${next.host}` });
        }
        current = next;
        continue;
      }
      if (status < 200 || status >= 300) {
        response.destroy(); // an error page is not worth downloading
        throw statusFailure(status, response);
      }
      const body = await readBody(response, signal);
      const contentType = response.headers['content-type'] ?? null;
      return { finalUrl: current.href, status, contentType, body };
    }
  }

  async function fetchUrl(url: string, signal?: AbortSignal): Promise<FetchedResource> {
    const aborted = (attempts: number, cause?: unknown): FetchError =>
      new FetchError({ url, permanent: false, reason: 'aborted', attempts, detail: 'the caller aborted the fetch', cause });
    if (signal?.aborted) throw aborted(0, signal.reason);

    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch (error) {
      throw new FetchError({ url, permanent: true, reason: 'invalid url', attempts: 0, detail: errorMessage(error), cause: error });
    }
    if (!isHttpUrl(parsed)) {
      throw new FetchError({ url, permanent: true, reason: 'unsupported scheme', attempts: 0, detail: `only http and https URLs can be fetched, not ${parsed.protocol}` });
    }

    const host = parsed.host.toLowerCase();
    const skippedUntil = activeSkipUntil(host);
    if (skippedUntil !== null) {
      throw new FetchError({
        url,
        permanent: false,
        reason: 'host auto-skipped',
        attempts: 0,
        detail: `too many recent failures on ${host}; skipped until ${new Date(skippedUntil).toISOString()}`,
      });
    }

    for (let attempt = 1; ; attempt += 1) {
      const attemptController = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        attemptController.abort(new Error(`no complete answer within ${settings.timeoutMs} ms`));
      }, settings.timeoutMs);
      const forwardAbort = (): void => attemptController.abort(signal?.reason);
      signal?.addEventListener('abort', forwardAbort, { once: true });

      let failure: AttemptFailureInit;
      try {
        const result = await attemptOnce(parsed, attemptController.signal);
        recordOutcome(host, false);
        return {
          url,
          finalUrl: result.finalUrl,
          status: result.status,
          contentType: result.contentType,
          body: result.body,
          sha256: createHash('sha256').update(result.body).digest('hex'),
          fetchedAt: new Date(now()).toISOString(),
        };
      } catch (error) {
        if (signal?.aborted) throw aborted(attempt, error);
        if (error instanceof AttemptFailure) failure = error.failure;
        else if (error instanceof RefusedAddressError) failure = { permanent: true, reason: 'address refused', code: error.code, detail: error.message };
        else if (timedOut) failure = { permanent: false, reason: 'timeout', detail: `no complete answer within ${settings.timeoutMs} ms`, cause: error };
        else failure = classifyNetworkError(error);
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', forwardAbort);
      }

      const attemptLimit = failure.status === 403 ? retry403MaxAttempts : maxAttempts;
      // A server that asks for more time than a backoff may take is not asked again sooner: the
      // fetch ends now, transient, saying when the server will answer (a retry of the source then).
      const waitTooLong = failure.retryAfterMs !== undefined && failure.retryAfterMs > settings.maxDelayMs;
      if (waitTooLong) failure = { ...failure, detail: `${failure.detail ?? failure.reason}; the server asks to retry after ${Math.ceil((failure.retryAfterMs ?? 0) / 1000)} s, more than providers.resolution.retry.max_delay` };
      if (failure.permanent || attempt >= attemptLimit || waitTooLong) {
        // A permanent failure is the page's (a 404, no document): the host answered (isHostFailure).
        recordOutcome(host, !failure.permanent);
        throw new FetchError({
          url,
          permanent: failure.permanent,
          reason: failure.reason,
          attempts: attempt,
          ...(failure.status !== undefined ? { status: failure.status } : {}),
          ...(failure.code !== undefined ? { code: failure.code } : {}),
          ...(failure.detail !== undefined ? { detail: failure.detail } : {}),
          cause: failure.cause,
        });
      }

      try {
        await sleep(failure.retryAfterMs ?? backoffDelay(attempt), signal);
      } catch (error) {
        if (signal?.aborted) throw aborted(attempt, error);
        throw error;
      }
      if (signal?.aborted) throw aborted(attempt, signal.reason);
    }
  }

  function hostStats(hostOrUrl: string): HostStats {
    const host = hostKey(hostOrUrl);
    const record = hosts.get(host);
    return {
      host,
      successes: record?.successes ?? 0,
      failures: record?.failures ?? 0,
      recentOutcomes: record?.recent.length ?? 0,
      recentFailures: record?.recent.filter(Boolean).length ?? 0,
      skippedUntil: activeSkipUntil(host),
    };
  }

  return { fetch: fetchUrl, hostStats };
}
