import { OAuthError } from './errors.js';
import { isMetadataDocumentClientId, validateMetadataDocument, type OAuthClient } from './clientMetadata.js';

/** What fetching a Client ID Metadata Document gives back (a subset of the HTTP fetcher's result). */
export interface FetchedClientDocument {
  /** The URL that answered, after redirects: it must be the one asked for. */
  finalUrl: string;
  status: number;
  contentType: string | null;
  body: Buffer;
}

/**
 * How metadata documents are fetched. The service wires the HTTP fetcher of
 * `src/providers/fetch/http.ts` (and whatever guard it applies to the addresses it connects to);
 * tests inject one that serves documents from a local server.
 */
export type ClientDocumentFetch = (url: string) => Promise<FetchedClientDocument>;

export const CLIENT_DOCUMENT_MAX_BYTES = 64 * 1024;
const CLIENT_DOCUMENT_CACHE_TTL_MS = 10 * 60 * 1000;
const MAX_CACHED_DOCUMENTS = 500;

export interface ClientDocumentResolver {
  /** The validated client a metadata-document `client_id` describes; throws `OAuthError('invalid_client')`. */
  resolve(clientId: string): Promise<OAuthClient>;
}

/**
 * Fetches, validates and caches Client ID Metadata Documents. A valid document is cached for
 * `ttlMs` (an unavailable or invalid one is not, so a fixed document is seen on the next try);
 * concurrent requests for one URL share one fetch.
 */
export function createClientDocumentResolver(fetchDocument: ClientDocumentFetch, options: { ttlMs?: number; now?: () => number } = {}): ClientDocumentResolver {
  const ttlMs = options.ttlMs ?? CLIENT_DOCUMENT_CACHE_TTL_MS;
  const now = options.now ?? Date.now;
  const cache = new Map<string, { client: OAuthClient; expiresAt: number }>();
  const inFlight = new Map<string, Promise<OAuthClient>>();

  async function load(url: string): Promise<OAuthClient> {
    let fetched: FetchedClientDocument;
    try {
      fetched = await fetchDocument(url);
    } catch {
      // Not why: a refused address, a closed port and a timeout told apart would let anyone map
      // what the server can reach (the embedded profile fetches loopback documents).
      throw new OAuthError('invalid_client', 'the client metadata document could not be fetched');
    }
    if (fetched.finalUrl !== url) throw new OAuthError('invalid_client', 'the client metadata document URL redirected elsewhere');
    if (fetched.status !== 200) throw new OAuthError('invalid_client', `the client metadata document answered HTTP ${fetched.status}`);
    if (!/^application\/([\w.+-]+\+)?json\b/i.test(fetched.contentType ?? '')) throw new OAuthError('invalid_client', 'the client metadata document is not application/json');
    if (fetched.body.length > CLIENT_DOCUMENT_MAX_BYTES) throw new OAuthError('invalid_client', `the client metadata document is larger than ${CLIENT_DOCUMENT_MAX_BYTES} bytes`);
    let document: unknown;
    try {
      document = JSON.parse(fetched.body.toString('utf8'));
    } catch {
      throw new OAuthError('invalid_client', 'the client metadata document is not valid JSON');
    }
    return validateMetadataDocument(url, document);
  }

  return {
    async resolve(clientId) {
      if (!isMetadataDocumentClientId(clientId)) throw new OAuthError('invalid_client', 'client_id is not a valid client metadata document URL');
      const cached = cache.get(clientId);
      if (cached && cached.expiresAt > now()) return cached.client;
      let pending = inFlight.get(clientId);
      if (!pending) {
        pending = load(clientId).finally(() => inFlight.delete(clientId));
        inFlight.set(clientId, pending);
      }
      const client = await pending;
      cache.delete(clientId);
      cache.set(clientId, { client, expiresAt: now() + ttlMs });
      // Insertion order is age order: drop the oldest beyond the bound.
      while (cache.size > MAX_CACHED_DOCUMENTS) cache.delete(cache.keys().next().value as string);
      return client;
    },
  };
}
