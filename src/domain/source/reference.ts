import { normalizeDoi } from '../../providers/fetch/doi.js';
import { DomainError } from '../decider.js';

/** The longest URL and DOI a source may be added by, in characters (every transport's bound). */
export const MAX_SOURCE_URL_CHARS = 4096;
export const MAX_SOURCE_DOI_CHARS = 512;

/** The URL or DOI a source is registered under: an absolute http(s) URL, or a normalised DOI. */
export type SourceReference = { url: string; doi: null } | { url: null; doi: string };

/**
 * A URL or DOI as a source is registered under: an absolute http(s) URL in the one spelling the
 * server it names reads alike (sameDocumentUrl), or a normalised DOI (a doi.org URL is its DOI).
 * Refused (`invalid`) when it is neither or both.
 */
export function normalizeReference(reference: { url?: string; doi?: string }): SourceReference {
  if ((reference.url === undefined) === (reference.doi === undefined)) throw invalid('give exactly one of url or doi');
  if (reference.url !== undefined) {
    let parsed: URL;
    try {
      parsed = new URL(reference.url);
    } catch {
      throw invalid('url is not a valid absolute URL');
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw invalid('url must use http or https');
    // A URL is stored, shown and logged: credentials in it would leak to every reader.
    if (parsed.username || parsed.password) throw invalid('url must not contain credentials (user:password@)');
    // A fragment never reaches the server: `page#part` is the document `page` is.
    parsed.hash = '';
    // A doi.org URL names a DOI: the same source as the DOI added as one.
    const doi = doiOfResolverUrl(parsed);
    if (doi !== null) return { url: null, doi };
    return { url: sameDocumentUrl(parsed), doi: null };
  }
  try {
    return { url: null, doi: normalizeDoi(reference.doi ?? '') };
  } catch (error) {
    throw invalid((error as Error).message);
  }
}

/**
 * The one key every spelling of a reference shares: `url:<url>` or `doi:<DOI in lower case>`
 * (DOIs compare case-insensitively; the source keeps the letters it was added with). The sources
 * read model stores it (`reference_key`), and adding a URL or DOI looks it up and locks it.
 */
export function referenceKey(reference: SourceReference): string {
  return reference.url !== null ? `url:${reference.url}` : `doi:${reference.doi.toLowerCase()}`;
}

/**
 * The reference key of a registered source, from its SourceRegistered's `url` or `doi` as any
 * release wrote them; null for an upload (no address to compare). A spelling an older release
 * stored gets today's key. One today's rules refuse is never an error (the event is history):
 * its key is the URL as written without its fragment, or the DOI in lower case.
 */
export function referenceKeyOfRegistered(data: { url?: string | null; doi?: string | null }): string | null {
  const { url, doi } = data;
  if (typeof url === 'string') {
    try {
      return referenceKey(normalizeReference({ url }));
    } catch {
      return `url:${url.split('#', 1)[0]}`;
    }
  }
  if (typeof doi === 'string') {
    try {
      return referenceKey(normalizeReference({ doi }));
    } catch {
      return `doi:${doi.toLowerCase()}`;
    }
  }
  return null;
}

const invalid = (message: string) => new DomainError('invalid', message);

/** The DOI a doi.org (or dx.doi.org) URL resolves, or null for any other URL. */
function doiOfResolverUrl(url: URL): string | null {
  if (!/^(?:dx\.)?doi\.org\.?$/i.test(url.hostname) || url.search !== '') return null;
  try {
    return normalizeDoi(`https://doi.org${url.pathname}`);
  } catch {
    return null;
  }
}

/**
 * A URL as the server it names reads it (RFC 3986, 6.2.2-6.2.3), so that spellings of one address
 * find one source: an empty query dropped (`page?` is `page`), a host's trailing dot dropped
 * (`localhost.`), letters, digits and `-._~` written as themselves (`%62ase` is `base`), and every
 * other escape with upper-case hex digits (`%2f` is `%2F`, 6.2.2.1), still escaped: `a%2Fb` is one
 * path segment and `a/b` two, which a server may tell apart. A `%` that begins no escape stays as
 * written, and an escaped hex digit after one stays escaped, or unescaping it would make a new
 * escape. The URL parser has already lowered the scheme and host, dropped a default port and
 * resolved dot segments (the fragment is gone before this).
 */
function sameDocumentUrl(url: URL): string {
  if (url.hostname.endsWith('.') && url.hostname.length > 1) url.hostname = url.hostname.slice(0, -1);
  const canonicalEscapes = (part: string) => {
    let out = '';
    let from = 0;
    for (const match of part.matchAll(/%[0-9a-f]{2}/gi)) {
      out += part.slice(from, match.index);
      from = match.index + 3;
      const char = String.fromCharCode(Number.parseInt(match[0].slice(1), 16));
      // A hex digit that would make a stray % before it an escape stays escaped: `%%4141` is not `%A41`.
      const joinsStrayPercent = /[0-9A-Fa-f]/.test(char) && /%[0-9A-Fa-f]?$/.test(out);
      out += /[A-Za-z0-9\-._~]/.test(char) && !joinsStrayPercent ? char : match[0].toUpperCase();
    }
    return out + part.slice(from);
  };
  url.pathname = canonicalEscapes(url.pathname);
  // Setting the query, even to what it reads as, drops the `?` of an empty one.
  url.search = canonicalEscapes(url.search);
  return url.toString();
}
