import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { decodeJwt } from 'jose';
import { oauthClientDecider } from '../domain/oauthClient/decider.js';
import { streamName } from '../eventstore/envelope.js';
import type { IdentityService, PublicUser } from '../auth/identity.js';
import { InvalidTokenError, type AccessClaims, type TokenService } from '../auth/tokens.js';
import { OAuthError } from '../auth/oauth/errors.js';
import { isValidCodeVerifier, isValidS256Challenge, PKCE_METHOD, verifyCodeVerifier } from '../auth/oauth/pkce.js';
import {
  isMetadataDocumentClientId,
  isRegisteredRedirectUri,
  OAUTH_SCOPE,
  validateClientMetadata,
  type ClientRegistration,
  type GrantType,
  type OAuthClient,
} from '../auth/oauth/clientMetadata.js';
import type { ClientDocumentResolver } from '../auth/oauth/clientDocuments.js';
import type { GrantStore } from '../auth/oauth/grants.js';
import { mcpResourceUrl } from '../auth/oauth/resource.js';
import type { CommandBus } from './commands.js';
import type { Trace } from './access.js';

/**
 * The OAuth 2.1 authorization server for MCP clients, independent of HTTP: client
 * registration and lookup (dynamic registration and metadata documents), authorization
 * requests, codes, the token grants, revocation, and the access-token check a resource server
 * makes. Routes (src/api/routes/oauth.ts) parse, call these and render OAuth's answers.
 */

const PURGE_INTERVAL_MS = 3_600_000;

/** Query or form parameters as a parser gives them: a repeated parameter is an array. */
export type OAuthParams = Record<string, string | string[] | undefined>;

/** An authorization request that passed every check: what the consent page shows and approval binds the code to. */
export interface AuthorizationRequest {
  /** Made when the request is checked; it is answered (approved or denied) once under this id. */
  id: string;
  client_id: string;
  redirect_uri: string;
  code_challenge: string;
  scope: string;
  state: string | null;
  resource: string;
}

export type AuthorizationCheck =
  | { ok: true; client: OAuthClient; request: AuthorizationRequest }
  /** `redirectUri` null: the redirect URI cannot be trusted, so the error is shown, never redirected. */
  | { ok: false; error: OAuthError; redirectUri: string | null; state: string | null };

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  scope: string;
  refresh_token?: string;
}

type RegisteredClientMetadata = Omit<ClientRegistration, 'client_uri' | 'software_id' | 'software_version'> & {
  client_uri?: string;
  software_id?: string;
  software_version?: string;
};

export type RegisteredClientResponse = RegisteredClientMetadata & {
  client_id: string;
  client_id_issued_at: number;
};

export interface OAuthServerDeps {
  knex: Knex;
  commands: CommandBus;
  tokens: TokenService;
  identity: Pick<IdentityService, 'verifyCredentials' | 'loadUser'>;
  grants: GrantStore;
  clientDocuments: ClientDocumentResolver;
  now?: () => number;
}

/** A single-valued parameter, or an `invalid_request` for a repeated one (RFC 6749 3.1). */
function single(params: OAuthParams, name: string): string | undefined {
  const value = params[name];
  if (Array.isArray(value)) throw new OAuthError('invalid_request', `parameter ${name} must not be repeated`);
  return value === undefined || value === '' ? undefined : value;
}

function required(params: OAuthParams, name: string): string {
  const value = single(params, name);
  if (value === undefined) throw new OAuthError('invalid_request', `parameter ${name} is required`);
  return value;
}

/** The requested scope: only `mcp` exists; absent means `mcp`. */
function resolveScope(scope: string | undefined): string {
  if (scope === undefined) return OAUTH_SCOPE;
  const items = scope.split(' ').filter((item) => item !== '');
  if (items.length === 0 || !items.every((item) => item === OAUTH_SCOPE)) throw new OAuthError('invalid_scope', `the only scope is "${OAUTH_SCOPE}"`);
  return OAUTH_SCOPE;
}

/**
 * The RFC 8707 resource of a request: absent means the MCP endpoint; the MCP endpoint is the
 * only resource this server issues tokens for, so anything else is `invalid_target`.
 */
function resolveResource(given: string | string[] | undefined, issuer: string): string {
  const mcp = mcpResourceUrl(issuer);
  if (given === undefined || given === '') return mcp;
  const values = [...new Set(Array.isArray(given) ? given : [given])];
  if (values.length !== 1) throw new OAuthError('invalid_target', 'only one resource may be requested');
  let url: URL;
  try {
    url = new URL(values[0]);
  } catch {
    throw new OAuthError('invalid_target', 'resource must be an absolute URI');
  }
  if (values[0].includes('#')) throw new OAuthError('invalid_target', 'resource must not contain a fragment');
  if (url.href !== new URL(mcp).href) throw new OAuthError('invalid_target', `unknown resource; this server issues tokens for ${mcp}`);
  return mcp;
}

/** A consent form posted after its request was decided: shown on a page, never sent to the client, which had its answer. */
const alreadyAnswered = () => new OAuthError('invalid_request', 'this authorization request was already answered; start again from the application');

export function createOAuthServer(deps: OAuthServerDeps) {
  const { knex, tokens, grants } = deps;
  const now = deps.now ?? Date.now;

  async function findRegisteredClient(clientId: string): Promise<OAuthClient | null> {
    const row = await knex('oauth_clients').where({ client_id: clientId }).first();
    if (!row) return null;
    return {
      client_id: row.client_id,
      client_name: row.client_name,
      redirect_uris: row.redirect_uris,
      grant_types: row.grant_types,
      application_type: row.application_type,
      client_uri: row.client_uri,
      kind: 'registered',
    };
  }

  /** A client by id: a registered one, or the client an https metadata-document URL describes. Throws `invalid_client`. */
  async function findClient(clientId: string): Promise<OAuthClient> {
    if (isMetadataDocumentClientId(clientId)) return deps.clientDocuments.resolve(clientId);
    if (clientId.length > 200) throw new OAuthError('invalid_client', 'unknown client_id');
    const client = await findRegisteredClient(clientId);
    if (!client) throw new OAuthError('invalid_client', 'unknown client_id');
    return client;
  }

  async function issueTokens(grant: { id: string; client_id: string; user_id: string; scope: string; resource: string }, client: OAuthClient, refreshToken?: string): Promise<TokenResponse> {
    const access = await tokens.signAccessToken({ userId: grant.user_id, clientId: grant.client_id, scope: grant.scope, audience: grant.resource, grantId: grant.id });
    const refresh = refreshToken ?? (client.grant_types.includes('refresh_token' satisfies GrantType) ? await grants.issueRefreshToken(grant.id) : undefined);
    return {
      access_token: access.token,
      token_type: 'Bearer',
      expires_in: Math.max(0, Math.round((access.expiresAt.getTime() - now()) / 1000)),
      scope: grant.scope,
      ...(refresh === undefined ? {} : { refresh_token: refresh }),
    };
  }

  /** Expired codes, tokens and answered requests go at most once an hour per process, on a decision (no job needed for small tables). */
  let lastPurge = Number.NEGATIVE_INFINITY;
  async function purgeNowAndThen(): Promise<void> {
    if (now() - lastPurge < PURGE_INTERVAL_MS) return;
    lastPurge = now();
    await grants.purgeExpired();
  }

  async function exchangeCode(params: OAuthParams, issuer: string): Promise<TokenResponse> {
    const clientId = required(params, 'client_id');
    const code = required(params, 'code');
    const redirectUri = required(params, 'redirect_uri');
    const verifier = required(params, 'code_verifier');
    if (!isValidCodeVerifier(verifier)) throw new OAuthError('invalid_request', 'code_verifier must be 43 to 128 unreserved characters (RFC 7636)');
    // A resource named here must be known before the code is spent on it.
    const resource = params.resource === undefined ? undefined : resolveResource(params.resource, issuer);
    const client = await findClient(clientId);
    const redemption = await grants.redeemCode(code);
    switch (redemption.status) {
      case 'unknown':
        throw new OAuthError('invalid_grant', 'unknown authorization code');
      case 'reused':
        throw new OAuthError('invalid_grant', 'authorization code was already used; the tokens issued from it are revoked');
      case 'expired':
        throw new OAuthError('invalid_grant', 'authorization code has expired');
      case 'revoked':
        throw new OAuthError('invalid_grant', 'authorization was revoked');
    }
    const { grant, codeChallenge } = redemption;
    if (grant.client_id !== client.client_id) throw new OAuthError('invalid_grant', 'authorization code was issued to another client');
    if (grant.redirect_uri !== redirectUri) throw new OAuthError('invalid_grant', 'redirect_uri differs from the authorization request');
    if (!verifyCodeVerifier(verifier, codeChallenge)) throw new OAuthError('invalid_grant', 'code_verifier does not match the code_challenge');
    if (resource !== undefined && resource !== grant.resource) throw new OAuthError('invalid_target', 'resource differs from the one the code was issued for');
    return issueTokens(grant, client);
  }

  async function refresh(params: OAuthParams, issuer: string): Promise<TokenResponse> {
    const clientId = required(params, 'client_id');
    const refreshToken = required(params, 'refresh_token');
    const scope = single(params, 'scope');
    if (scope !== undefined) resolveScope(scope);
    const resource = params.resource === undefined ? undefined : resolveResource(params.resource, issuer);
    const client = await findClient(clientId);
    if (!client.grant_types.includes('refresh_token')) throw new OAuthError('unauthorized_client', 'client did not register the refresh_token grant');
    // Before rotating: a refusal after it would leave the client without the new token, and its
    // retry with the old one would count as reuse and revoke the whole grant. (A grant's resource
    // never changes; another client's token is left to rotateRefreshToken, which tells nothing.)
    if (resource !== undefined) {
      const current = await grants.grantOfRefreshToken(refreshToken);
      if (current !== null && current.client_id === client.client_id && current.resource !== resource) {
        throw new OAuthError('invalid_target', 'resource differs from the one the authorization was granted for');
      }
    }
    const rotation = await grants.rotateRefreshToken(refreshToken, client.client_id);
    switch (rotation.status) {
      case 'unknown':
      case 'wrong_client':
        throw new OAuthError('invalid_grant', 'unknown refresh token');
      case 'expired':
        throw new OAuthError('invalid_grant', 'refresh token has expired');
      case 'revoked':
        throw new OAuthError('invalid_grant', 'refresh token was revoked');
      case 'reused':
        throw new OAuthError('invalid_grant', 'refresh token was already used; every token of its authorization is revoked');
    }
    return issueTokens(rotation.grant, client, rotation.refreshToken);
  }

  return {
    findClient,

    /** RFC 7591 dynamic registration of a public client: an `OAuthClientRegistered` event. Anyone may register. */
    async registerClient(input: unknown, trace: Trace = {}): Promise<RegisteredClientResponse> {
      const metadata = validateClientMetadata(input);
      const clientId = randomUUID();
      await deps.commands.execute(streamName('oauthclient', clientId), oauthClientDecider, { type: 'RegisterOAuthClient', metadata }, {
        repositoryId: null,
        actor: 'system:oauth-registration',
        causationId: null,
        correlationId: trace.correlationId ?? null,
      }, { newStream: true });
      // RFC 7591 3.2.1: the response holds the registered metadata; fields without a value are left out, not null.
      const present = Object.fromEntries(Object.entries(metadata).filter(([, value]) => value !== null)) as RegisteredClientMetadata;
      return { client_id: clientId, client_id_issued_at: Math.floor(now() / 1000), ...present };
    },

    /**
     * Checks an authorization request (RFC 6749 4.1.1 with PKCE and RFC 8707). The client and
     * the redirect URI are checked first: until both are trusted, an error is shown to the user
     * and never sent to the redirect URI.
     */
    async checkAuthorizationRequest(params: OAuthParams, issuer: string): Promise<AuthorizationCheck> {
      const untrusted = (error: OAuthError): AuthorizationCheck => ({ ok: false, error, redirectUri: null, state: null });
      let clientId: string | undefined;
      let redirectUri: string | undefined;
      let state: string | null;
      try {
        clientId = single(params, 'client_id');
        redirectUri = single(params, 'redirect_uri');
        state = single(params, 'state') ?? null;
      } catch (error) {
        if (error instanceof OAuthError) return untrusted(error);
        throw error;
      }
      if (clientId === undefined) return untrusted(new OAuthError('invalid_request', 'client_id is required'));
      let client: OAuthClient;
      try {
        client = await findClient(clientId);
      } catch (error) {
        if (error instanceof OAuthError) return untrusted(error);
        throw error;
      }
      if (redirectUri === undefined) return untrusted(new OAuthError('invalid_request', 'redirect_uri is required'));
      if (!isRegisteredRedirectUri(client.redirect_uris, redirectUri)) return untrusted(new OAuthError('invalid_request', 'redirect_uri is not registered for this client'));
      if (state !== null && state.length > 2000) return untrusted(new OAuthError('invalid_request', 'state is too long'));

      try {
        const responseType = single(params, 'response_type');
        if (responseType !== 'code') throw new OAuthError('unsupported_response_type', 'response_type must be "code"');
        const challenge = single(params, 'code_challenge');
        const method = single(params, 'code_challenge_method');
        if (challenge === undefined) throw new OAuthError('invalid_request', 'code_challenge is required (PKCE)');
        if (method !== PKCE_METHOD) throw new OAuthError('invalid_request', 'code_challenge_method must be S256');
        if (!isValidS256Challenge(challenge)) throw new OAuthError('invalid_request', 'code_challenge must be 43 base64url characters (S256)');
        const scope = resolveScope(single(params, 'scope'));
        const resource = resolveResource(params.resource, issuer);
        return { ok: true, client, request: { id: randomUUID(), client_id: client.client_id, redirect_uri: redirectUri, code_challenge: challenge, scope, state, resource } };
      } catch (error) {
        if (error instanceof OAuthError) return { ok: false, error, redirectUri, state };
        throw error;
      }
    },

    /** Refuses a request that was already approved or denied (`invalid_request`): before a form is acted on. */
    async assertUnanswered(request: AuthorizationRequest): Promise<void> {
      if (await grants.isAnswered(request.id)) throw alreadyAnswered();
    },

    /**
     * The user approved: a grant and its single-use code. A request is answered once, so a
     * replayed consent form, or the second of two concurrent posts, is `invalid_request` and
     * issues nothing. `openUntil`: when the last form carrying the request expires.
     */
    async approve(userId: string, request: AuthorizationRequest, openUntil: Date): Promise<{ code: string }> {
      await purgeNowAndThen();
      const created = await grants.createGrant(
        {
          client_id: request.client_id,
          user_id: userId,
          scope: request.scope,
          resource: request.resource,
          redirect_uri: request.redirect_uri,
          codeChallenge: request.code_challenge,
        },
        { id: request.id, openUntil },
      );
      if (!created) throw alreadyAnswered();
      return { code: created.code };
    },

    /** The user denied: the request is answered, once, as by `approve`. */
    async deny(request: AuthorizationRequest, openUntil: Date): Promise<void> {
      await purgeNowAndThen();
      if (!(await grants.answerRequest({ id: request.id, openUntil }))) throw alreadyAnswered();
    },

    /** The token endpoint (RFC 6749 3.2): `authorization_code` with PKCE, `refresh_token` with rotation. */
    async token(params: OAuthParams, issuer: string): Promise<TokenResponse> {
      const grantType = required(params, 'grant_type');
      if (grantType === 'authorization_code') return exchangeCode(params, issuer);
      if (grantType === 'refresh_token') return refresh(params, issuer);
      throw new OAuthError('unsupported_grant_type', 'grant_type must be authorization_code or refresh_token');
    },

    /**
     * RFC 7009 revocation. A refresh token or an access token of this server revokes its whole
     * grant (RFC 7009 2.1 allows both). Unknown tokens, and tokens of another client, change
     * nothing and are answered like success, so revocation tells nobody what exists.
     */
    async revoke(params: OAuthParams): Promise<void> {
      const token = required(params, 'token');
      const clientId = required(params, 'client_id');
      // The hint only speeds up a lookup (RFC 7009 2.1); both kinds are looked up whatever it says.
      single(params, 'token_type_hint');
      const refreshGrant = await grants.grantOfRefreshToken(token);
      if (refreshGrant) {
        if (refreshGrant.client_id === clientId) await grants.revokeGrant(refreshGrant.id, 'revoked by the client');
        return;
      }
      const grantId = await accessTokenGrant(token);
      if (grantId === null) return;
      const grant = await grants.grantById(grantId);
      if (grant && grant.client_id === clientId) await grants.revokeGrant(grant.id, 'revoked by the client');
    },

    /**
     * What a resource server calls with a bearer token: the signature, expiry, type and
     * audience (`context.tokens.verify`, which also requires `sid`), then the grant it descends
     * from: it must exist, not be revoked, and be the grant of the token's user, client and
     * resource. The signature alone is not trusted: a token the grant table does not vouch for
     * is refused, so revoking a grant ends its tokens at once and a leaked secret is not enough.
     * Throws `InvalidTokenError`.
     */
    async verifyAccessToken(token: string, resource: string): Promise<AccessClaims> {
      const claims = await tokens.verify(token, 'access', resource);
      const grant = await grants.grantById(claims.sid);
      if (!grant) throw new InvalidTokenError('invalid', 'the token names no known authorization');
      if (grant.revoked) throw new InvalidTokenError('invalid', 'the authorization was revoked');
      if (grant.user_id !== claims.sub || grant.client_id !== claims.client_id || grant.resource !== claims.aud) {
        throw new InvalidTokenError('invalid', 'the token does not match its authorization');
      }
      return claims;
    },

    /** The OAuth login form's check (no session is opened). */
    async login(input: { email: string; password: string }): Promise<PublicUser> {
      return deps.identity.verifyCredentials(input);
    },

    loadUser: (userId: string) => deps.identity.loadUser(userId),
  };

  /** The grant (`sid`) of an access token of this server with a valid signature, or null. */
  async function accessTokenGrant(token: string): Promise<string | null> {
    let audience: unknown;
    try {
      audience = decodeJwt(token).aud;
    } catch {
      return null;
    }
    if (typeof audience !== 'string' || audience === '') return null;
    try {
      const claims = await tokens.verify(token, 'access', audience);
      return claims.sid;
    } catch (error) {
      if (error instanceof InvalidTokenError) return null;
      throw error;
    }
  }
}

export type OAuthServer = ReturnType<typeof createOAuthServer>;
