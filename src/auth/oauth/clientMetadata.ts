import { OAuthError } from './errors.js';
import { runeLength } from '../../util/codePoints.js';

/**
 * Client metadata rules shared by dynamic registration (RFC 7591) and Client ID Metadata
 * Documents (the https `client_id` whose JSON document describes the client). Pure: no I/O.
 */

export const OAUTH_SCOPE = 'mcp';
export const MAX_REDIRECT_URIS = 10;
const MAX_URI_LENGTH = 2000;
export const MAX_CLIENT_NAME_CHARS = 200;

const SUPPORTED_GRANT_TYPES = ['authorization_code', 'refresh_token'] as const;
export type GrantType = (typeof SUPPORTED_GRANT_TYPES)[number];
const APPLICATION_TYPES = ['web', 'native'] as const;

/** A client as the authorization and token endpoints need it, whichever way it is known. */
export interface OAuthClient {
  client_id: string;
  client_name: string;
  redirect_uris: string[];
  grant_types: GrantType[];
  application_type: 'web' | 'native';
  client_uri: string | null;
  /** `registered` (dynamic registration, an `oauthclient-<id>` stream) or `metadata_document` (CIMD). */
  kind: 'registered' | 'metadata_document';
}

/** The metadata a registration records (the data of `OAuthClientRegistered`; a type alias, so it is a plain record). */
export type ClientRegistration = {
  client_name: string;
  redirect_uris: string[];
  grant_types: GrantType[];
  response_types: ['code'];
  token_endpoint_auth_method: 'none';
  application_type: 'web' | 'native';
  client_uri: string | null;
  software_id: string | null;
  software_version: string | null;
};

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost']);

/**
 * Why a redirect URI is refused, or null when it is acceptable: an absolute https URL, or http
 * on a loopback host (RFC 8252 7.3: native apps listening on the machine), without fragment
 * (RFC 6749 3.1.2) or user information. Matching is exact but for a loopback URI's port
 * (`isRegisteredRedirectUri`).
 */
export function redirectUriProblem(uri: unknown): string | null {
  if (typeof uri !== 'string' || uri.length === 0) return 'a redirect URI must be a non-empty string';
  if (uri.length > MAX_URI_LENGTH) return `a redirect URI must be at most ${MAX_URI_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return `redirect URI ${uri} is not an absolute URL`;
  }
  if (uri.includes('#')) return `redirect URI ${uri} must not contain a fragment`;
  if (url.username !== '' || url.password !== '') return `redirect URI ${uri} must not contain user information`;
  // Matched as written, redirected to as parsed: the two must be one URL. Spellings a parser
  // rewrites (`http://127.1/cb`, `http://2130706433/cb`, `https://@host/cb`, a trailing newline,
  // an upper-case host) would be compared as one string and sent to another.
  if (url.href !== uri && url.href !== `${uri}/`) return `redirect URI ${JSON.stringify(uri)} is not written as a URL parser writes it: register ${url.href}`;
  if (url.protocol === 'https:') return null;
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return null;
  if (url.protocol === 'http:') return `redirect URI ${uri} uses http on a host that is not loopback; use https`;
  return `redirect URI ${uri} must use https (or http on a loopback address)`;
}

/**
 * Whether `requested` is one of the client's `registered` redirect URIs: compared as strings,
 * exactly, except that an http loopback URI matches one registered at any port (RFC 8252 7.3 and
 * OAuth 2.1 "Loopback Interface Redirection" require it: a native client listens on whatever port
 * the system gives it, which a metadata document, written once, cannot name). Scheme, host, path
 * and query still match exactly; a loopback URI the parser would rewrite matches nothing.
 */
export function isRegisteredRedirectUri(registered: readonly string[], requested: string): boolean {
  if (registered.includes(requested)) return true;
  const portless = loopbackWithoutPort(requested);
  return portless !== null && registered.some((uri) => loopbackWithoutPort(uri) === portless);
}

/** An http loopback URI, as a URL parser writes it, without its port; null for any other URI. */
function loopbackWithoutPort(uri: string): string | null {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' || !LOOPBACK_HOSTS.has(url.hostname)) return null;
  if (uri.includes('#') || url.username !== '' || url.password !== '') return null;
  // The spelling rule of `redirectUriProblem`: compared as written, redirected to as parsed.
  if (url.href !== uri && url.href !== `${uri}/`) return null;
  url.port = '';
  return url.href;
}

function optionalString(metadata: Record<string, unknown>, field: string, maxLength: number): string | null {
  const value = metadata[field];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || runeLength(value) > maxLength) throw new OAuthError('invalid_client_metadata', `${field} must be a string of at most ${maxLength} characters`);
  return value;
}

function optionalHttpsUrl(metadata: Record<string, unknown>, field: string): string | null {
  const value = optionalString(metadata, field, MAX_URI_LENGTH);
  if (value === null) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new OAuthError('invalid_client_metadata', `${field} must be an absolute URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new OAuthError('invalid_client_metadata', `${field} must be an http(s) URL`);
  return value;
}

/**
 * Validates client metadata (a registration request or a metadata document) and returns what
 * is recorded. Fields this server does not understand are ignored (RFC 7591 2); fields it
 * understands must hold values it supports. Throws `OAuthError` with `invalid_redirect_uri` or
 * `invalid_client_metadata` (RFC 7591 3.2.2).
 */
export function validateClientMetadata(input: unknown): ClientRegistration {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new OAuthError('invalid_client_metadata', 'client metadata must be a JSON object');
  }
  const metadata = input as Record<string, unknown>;
  const redirectUris = metadata.redirect_uris;
  if (!Array.isArray(redirectUris) || redirectUris.length === 0) {
    throw new OAuthError('invalid_redirect_uri', 'redirect_uris must be a non-empty array of URIs');
  }
  if (redirectUris.length > MAX_REDIRECT_URIS) throw new OAuthError('invalid_redirect_uri', `at most ${MAX_REDIRECT_URIS} redirect URIs`);
  for (const uri of redirectUris) {
    const problem = redirectUriProblem(uri);
    if (problem) throw new OAuthError('invalid_redirect_uri', problem);
  }

  const authMethod = metadata.token_endpoint_auth_method;
  if (authMethod !== undefined && authMethod !== 'none') {
    throw new OAuthError('invalid_client_metadata', 'token_endpoint_auth_method must be "none": only public clients (PKCE, no secret) are supported');
  }
  if (metadata.client_secret !== undefined) throw new OAuthError('invalid_client_metadata', 'public clients have no client_secret');

  const grantTypes = metadata.grant_types ?? [...SUPPORTED_GRANT_TYPES];
  if (!Array.isArray(grantTypes) || grantTypes.length === 0 || !grantTypes.every((grant) => (SUPPORTED_GRANT_TYPES as readonly unknown[]).includes(grant))) {
    throw new OAuthError('invalid_client_metadata', `grant_types must be a non-empty subset of ${SUPPORTED_GRANT_TYPES.join(', ')}`);
  }
  if (!grantTypes.includes('authorization_code')) throw new OAuthError('invalid_client_metadata', 'grant_types must include authorization_code');

  const responseTypes = metadata.response_types ?? ['code'];
  if (!Array.isArray(responseTypes) || responseTypes.length !== 1 || responseTypes[0] !== 'code') {
    throw new OAuthError('invalid_client_metadata', 'response_types must be ["code"]');
  }

  const applicationType = metadata.application_type ?? 'web';
  if (!(APPLICATION_TYPES as readonly unknown[]).includes(applicationType)) throw new OAuthError('invalid_client_metadata', 'application_type must be "web" or "native"');

  const scope = metadata.scope;
  if (scope !== undefined && (typeof scope !== 'string' || !scope.split(' ').every((item) => item === OAUTH_SCOPE))) {
    throw new OAuthError('invalid_client_metadata', `scope may only be "${OAUTH_SCOPE}"`);
  }

  const clientName = optionalString(metadata, 'client_name', MAX_CLIENT_NAME_CHARS) ?? '';
  return {
    client_name: clientName.trim(),
    redirect_uris: [...new Set(redirectUris as string[])],
    grant_types: [...new Set(grantTypes as GrantType[])],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    application_type: applicationType as 'web' | 'native',
    client_uri: optionalHttpsUrl(metadata, 'client_uri'),
    software_id: optionalString(metadata, 'software_id', 200),
    software_version: optionalString(metadata, 'software_version', 200),
  };
}

/**
 * Whether a `client_id` names a Client ID Metadata Document: an https URL with a path, without
 * fragment, user information or dot segments (the CIMD draft's rules for client identifier URLs).
 */
export function isMetadataDocumentClientId(clientId: string): boolean {
  if (!clientId.startsWith('https://') || clientId.length > MAX_URI_LENGTH) return false;
  let url: URL;
  try {
    url = new URL(clientId);
  } catch {
    return false;
  }
  if (clientId.includes('#') || url.username !== '' || url.password !== '') return false;
  if (url.pathname === '/' || url.pathname === '') return false;
  // URL parsing resolves dot segments; the raw string must not have had any.
  const rawPath = clientId.slice(url.origin.length).split('?')[0];
  return !rawPath.split('/').some((segment) => segment === '.' || segment === '..' || segment.toLowerCase() === '%2e' || segment.toLowerCase() === '%2e%2e');
}

/**
 * Validates a fetched metadata document for `url`: its `client_id` must equal the URL exactly
 * (otherwise any page could claim to be any client), then the usual client metadata rules.
 */
export function validateMetadataDocument(url: string, document: unknown): OAuthClient {
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    throw new OAuthError('invalid_client', 'the client metadata document is not a JSON object');
  }
  const clientId = (document as Record<string, unknown>).client_id;
  if (clientId !== url) throw new OAuthError('invalid_client', 'the client metadata document\'s client_id does not equal its URL');
  let metadata: ClientRegistration;
  try {
    metadata = validateClientMetadata(document);
  } catch (error) {
    if (error instanceof OAuthError) throw new OAuthError('invalid_client', `the client metadata document is not acceptable: ${error.description}`);
    throw error;
  }
  return {
    client_id: url,
    client_name: metadata.client_name,
    redirect_uris: metadata.redirect_uris,
    grant_types: metadata.grant_types,
    application_type: metadata.application_type,
    client_uri: metadata.client_uri,
    kind: 'metadata_document',
  };
}
