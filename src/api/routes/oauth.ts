import { randomBytes } from 'node:crypto';
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import cookie from '@fastify/cookie';
import formbody from '@fastify/formbody';
import type { AppContext } from '../../app/appContext.js';
import type { AuthorizationRequest, OAuthParams } from '../../app/oauth.js';
import { AuthenticationError } from '../../auth/identity.js';
import { OAuthError } from '../../auth/oauth/errors.js';
import { isRegisteredRedirectUri, MAX_CLIENT_NAME_CHARS, MAX_REDIRECT_URIS, type OAuthClient } from '../../auth/oauth/clientMetadata.js';
import { createSignedValues, equalStrings } from '../../auth/oauth/signedValue.js';
import { issuerOf, OAUTH_PATHS } from '../issuer.js';
import { setCookie } from '../cookies.js';
import { HttpError } from '../errors.js';
import { mediaTypesRead } from '../mediaTypes.js';
import { allowPublicCors } from '../publicCors.js';
import { consentPage, errorPage, loginPage, OAUTH_STYLESHEET, OAUTH_STYLESHEET_PATH, type ClientPresentation } from '../oauthPages.js';


const CSRF_COOKIE = 'fl_oauth_csrf';
const LOGIN_COOKIE = 'fl_oauth_login';
/** A sign-in on the authorization page lasts this long: enough to approve, short enough not to be a session. */
const LOGIN_TTL_MS = 10 * 60 * 1000;
/** How long a login or consent form stays good. */
const FORM_TTL_MS = 30 * 60 * 1000;
const CSRF_NONCE_PATTERN = /^[A-Za-z0-9_-]{43}$/;

const oauthErrorSchema = {
  type: 'object',
  required: ['error'],
  properties: { error: { type: 'string' }, error_description: { type: 'string' } },
} as const;
const htmlReply = { type: 'string', description: 'an HTML page' } as const;

const stringParam = { type: 'string', maxLength: 4096 } as const;
/**
 * RFC 8707 lets `resource` repeat: one value is a string, a repeated one an array (as a form body
 * holds them; bodies are not coerced to their schema's types).
 */
const resourceParam = { anyOf: [{ type: 'string', maxLength: 2000 }, { type: 'array', items: { type: 'string', maxLength: 2000 }, maxItems: 10 }] } as const;

const authorizeQuery = {
  type: 'object',
  properties: {
    response_type: stringParam,
    client_id: stringParam,
    redirect_uri: stringParam,
    code_challenge: stringParam,
    code_challenge_method: stringParam,
    scope: stringParam,
    state: stringParam,
    resource: resourceParam,
    prompt: stringParam,
  },
} as const;

const formFields = {
  authorization_request: { type: 'string', maxLength: 16_384 },
  csrf: { type: 'string', maxLength: 200 },
} as const;

const tokenBody = {
  type: 'object',
  description: 'application/x-www-form-urlencoded; parameters this server does not know are ignored (RFC 6749 3.2)',
  properties: {
    grant_type: stringParam,
    code: stringParam,
    redirect_uri: stringParam,
    client_id: stringParam,
    code_verifier: stringParam,
    refresh_token: stringParam,
    scope: stringParam,
    resource: resourceParam,
  },
} as const;

const tokenReply = {
  type: 'object',
  required: ['access_token', 'token_type', 'expires_in', 'scope'],
  properties: {
    access_token: { type: 'string' },
    token_type: { type: 'string', enum: ['Bearer'] },
    expires_in: { type: 'integer' },
    scope: { type: 'string' },
    refresh_token: { type: 'string' },
  },
} as const;

const clientReply = {
  type: 'object',
  required: ['client_id', 'client_id_issued_at', 'redirect_uris', 'token_endpoint_auth_method'],
  properties: {
    client_id: { type: 'string' },
    client_id_issued_at: { type: 'integer' },
    client_name: { type: 'string' },
    redirect_uris: { type: 'array', items: { type: 'string' } },
    grant_types: { type: 'array', items: { type: 'string' } },
    response_types: { type: 'array', items: { type: 'string' } },
    token_endpoint_auth_method: { type: 'string', enum: ['none'] },
    application_type: { type: 'string', enum: ['web', 'native'] },
    client_uri: { type: 'string' },
    software_id: { type: 'string' },
    software_version: { type: 'string' },
  },
} as const;

type FormBody = { authorization_request?: string; csrf?: string };

const isFormEncoded = (request: FastifyRequest) => /^application\/x-www-form-urlencoded\b/i.test(request.headers['content-type'] ?? '');

/**
 * The OAuth 2.1 server's endpoints (docs/auth.md, "OAuth 2.1 server"): registration, the
 * authorization pages, token and revocation. Form and cookie parsing are registered here, for
 * these routes only.
 */
export const oauthRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { config, oauth } = context;
  await app.register(formbody);
  await app.register(cookie);
  allowPublicCors(app, [OAUTH_PATHS.register, OAUTH_PATHS.token, OAUTH_PATHS.revoke]);
  // Public clients do not authenticate: any Authorization header at the token or revocation
  // endpoint is a client authentication this server cannot take (answered below, RFC 6749 5.2).
  // The other endpoints ignore one, as the service's guard does for all of them.
  app.addHook('onRequest', async (request) => {
    const url = request.routeOptions.url;
    if ((url === OAUTH_PATHS.token || url === OAUTH_PATHS.revoke) && request.headers.authorization !== undefined) {
      throw new HttpError(401, 'unauthorized', 'client authentication is not supported');
    }
  });
  const signed = createSignedValues(config.auth.jwt_secret);
  // @fastify/cookie only parses here; cookies are written by src/api/cookies.ts, which alone says
  // what every cookie of the service carries (HttpOnly, SameSite, Secure outside development).
  const setAuthorizeCookie = (reply: FastifyReply, name: string, value: string, maxAgeSeconds: number) =>
    setCookie(reply, config.profile, name, value, { path: OAUTH_PATHS.authorize, maxAgeSeconds });

  /** Pages: no framing, no referrer (the URL holds the request), no caching, styles only from this origin. */
  function sendPage(reply: FastifyReply, status: number, html: string, redirectUri?: string): FastifyReply {
    const formAction = redirectUri ? `'self' ${new URL(redirectUri).origin}` : `'self'`;
    return reply
      .status(status)
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', `default-src 'none'; style-src 'self'; form-action ${formAction}; frame-ancestors 'none'; base-uri 'none'`)
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer')
      .header('x-content-type-options', 'nosniff')
      .header('cache-control', 'no-store')
      .send(html);
  }

  const sendErrorPage = (reply: FastifyReply, status: number, error: OAuthError) =>
    sendPage(reply, status, errorPage({ error: error.code, description: error.description }));

  /** RFC 6749 4.1.2 / RFC 9207: back to the (trusted) redirect URI with the result, `state` and `iss`. */
  function redirectWith(reply: FastifyReply, request: FastifyRequest, redirectUri: string, params: Record<string, string | null>): FastifyReply {
    const target = new URL(redirectUri);
    for (const [name, value] of Object.entries(params)) if (value !== null) target.searchParams.set(name, value);
    target.searchParams.set('iss', issuerOf(config, request));
    return reply.header('cache-control', 'no-store').header('referrer-policy', 'no-referrer').redirect(target.href, 302);
  }

  /**
   * The CSRF nonce of this browser (an HttpOnly cookie), made when missing and renewed with each
   * page so it outlives the form it serves; the form carries its MAC.
   */
  function csrfTokenFor(request: FastifyRequest, reply: FastifyReply): string {
    let nonce = request.cookies[CSRF_COOKIE];
    if (!nonce || !CSRF_NONCE_PATTERN.test(nonce)) nonce = randomBytes(32).toString('base64url');
    setAuthorizeCookie(reply, CSRF_COOKIE, nonce, (FORM_TTL_MS / 1000) * 2);
    return signed.mac('csrf', nonce);
  }

  function csrfValid(request: FastifyRequest<{ Body: FormBody }>): boolean {
    const nonce = request.cookies[CSRF_COOKIE];
    const token = request.body?.csrf;
    if (!nonce || !CSRF_NONCE_PATTERN.test(nonce) || typeof token !== 'string') return false;
    return equalStrings(token, signed.mac('csrf', nonce));
  }

  const presentation = (client: OAuthClient, request: AuthorizationRequest): ClientPresentation => ({
    clientName: client.client_name,
    clientId: client.client_id,
    identifiedBy: client.kind,
    redirectUri: request.redirect_uri,
  });

  async function loggedInUser(request: FastifyRequest) {
    const login = signed.verify<{ uid?: unknown }>('login', request.cookies[LOGIN_COOKIE]);
    if (!login || typeof login.uid !== 'string') return null;
    return oauth.loadUser(login.uid);
  }

  function renderLogin(reply: FastifyReply, request: FastifyRequest, status: number, client: OAuthClient, authorization: AuthorizationRequest, extra: { error?: string; email?: string } = {}) {
    const form = signed.sign('authorization-request', authorization, FORM_TTL_MS);
    return sendPage(reply, status, loginPage({ client: presentation(client, authorization), authorizationRequest: form, csrfToken: csrfTokenFor(request, reply), ...extra }), authorization.redirect_uri);
  }

  function renderConsent(reply: FastifyReply, request: FastifyRequest, client: OAuthClient, authorization: AuthorizationRequest, userEmail: string) {
    const form = signed.sign('authorization-request', authorization, FORM_TTL_MS);
    return sendPage(
      reply,
      200,
      consentPage({
        client: presentation(client, authorization),
        userEmail,
        scope: authorization.scope,
        resource: authorization.resource,
        authorizationRequest: form,
        csrfToken: csrfTokenFor(request, reply),
        switchAccountQuery: {
          response_type: 'code',
          client_id: authorization.client_id,
          redirect_uri: authorization.redirect_uri,
          code_challenge: authorization.code_challenge,
          code_challenge_method: 'S256',
          scope: authorization.scope,
          resource: authorization.resource,
          ...(authorization.state === null ? {} : { state: authorization.state }),
          prompt: 'login',
        },
      }),
      authorization.redirect_uri,
    );
  }

  /**
   * The checks every form post passes before anything else: the CSRF token (403 otherwise), the
   * signed authorization request, that it was not answered yet, and that its client still exists
   * and still lists its redirect URI (400 page otherwise). Null when a page was already sent.
   */
  async function formContext(request: FastifyRequest<{ Body: FormBody }>, reply: FastifyReply): Promise<{ client: OAuthClient; authorization: AuthorizationRequest } | null> {
    if (!csrfValid(request)) {
      sendErrorPage(reply, 403, new OAuthError('invalid_request', 'the form is missing its CSRF token or the token does not match this browser; start the authorization again'));
      return null;
    }
    const authorization = signed.verify<AuthorizationRequest & { exp: number }>('authorization-request', request.body.authorization_request);
    // A form signed before requests had ids cannot be answered once only: refused like an altered one.
    if (!authorization || typeof authorization.id !== 'string') {
      sendErrorPage(reply, 400, new OAuthError('invalid_request', 'the authorization request is missing, altered or expired; start again'));
      return null;
    }
    const { exp: _expiry, ...fields } = authorization;
    let client: OAuthClient;
    try {
      await oauth.assertUnanswered(fields);
      client = await oauth.findClient(fields.client_id);
    } catch (error) {
      if (!(error instanceof OAuthError)) throw error;
      sendErrorPage(reply, 400, error);
      return null;
    }
    if (!isRegisteredRedirectUri(client.redirect_uris, fields.redirect_uri)) {
      sendErrorPage(reply, 400, new OAuthError('invalid_request', 'redirect_uri is no longer registered for this client'));
      return null;
    }
    return { client, authorization: fields };
  }

  // Failures before a handler runs (schema, body parsing) are answered in OAuth's terms: an HTML
  // page on the authorization routes, `{error, error_description}` on the JSON ones. Anything
  // else (rate limits, server errors) goes to the service's handler.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof OAuthError) return reply.status(400).header('cache-control', 'no-store').send({ error: error.code, error_description: error.description });
    const url = request.routeOptions.url ?? '';
    // A client that tried to authenticate at the token or revocation endpoint (the hook above)
    // gets RFC 6749 5.2's answer.
    if (error.statusCode === 401 && (url === OAUTH_PATHS.token || url === OAUTH_PATHS.revoke)) {
      return reply
        .status(401)
        .header('cache-control', 'no-store')
        .header('www-authenticate', 'Basic realm="factlog"')
        .send({ error: 'invalid_client', error_description: 'public clients do not authenticate; send client_id in the form and no Authorization header' });
    }
    const clientError = error.validation !== undefined || error.statusCode === 400 || error.statusCode === 415;
    // The service's handler answers the rest ({error, message}); no answer of these endpoints is cached.
    if (!clientError) {
      reply.header('cache-control', 'no-store');
      throw error;
    }
    // A body in a media type the route does not read (src/api/mediaTypes.ts): say which it reads.
    const description = error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? `body must be ${mediaTypesRead(request).join(' or ')}` : error.message;
    if (url === OAUTH_PATHS.authorize || url === OAUTH_PATHS.login) return sendErrorPage(reply, 400, new OAuthError('invalid_request', description));
    const code = url === OAUTH_PATHS.register ? 'invalid_client_metadata' : 'invalid_request';
    return reply.status(400).header('cache-control', 'no-store').send({ error: code, error_description: description });
  });

  app.get(
    OAUTH_STYLESHEET_PATH,
    { schema: { tags: ['oauth'], summary: 'The stylesheet of the authorization pages', produces: ['text/css'], response: { 200: { type: 'string', description: 'CSS' } } } },
    async (_request, reply) => reply.header('content-type', 'text/css; charset=utf-8').header('cache-control', 'public, max-age=3600').send(OAUTH_STYLESHEET),
  );

  app.post(
    OAUTH_PATHS.register,
    {
      schema: {
        tags: ['oauth'],
        summary: 'Dynamic client registration (RFC 7591): a public client, no secret',
        body: {
          type: 'object',
          description: 'RFC 7591 client metadata; fields this server does not know are ignored, the ones below must hold values it supports',
          // Each field is checked in src/auth/oauth/clientMetadata.ts, so that a bad value is answered with RFC 7591's error codes
          // (`invalid_redirect_uri`, `invalid_client_metadata`) and a message of its own: only types are declared here.
          properties: {
            redirect_uris: { type: 'array', items: { type: 'string' }, description: `required: 1 to ${MAX_REDIRECT_URIS} URIs, https or http on a loopback address, compared exactly (a loopback one at any port)` },
            client_name: { type: 'string', description: `at most ${MAX_CLIENT_NAME_CHARS} characters` },
            grant_types: { type: 'array', items: { type: 'string' }, description: 'a subset of authorization_code and refresh_token that includes authorization_code (default both)' },
            response_types: { type: 'array', items: { type: 'string' }, description: 'only ["code"] (the default)' },
            token_endpoint_auth_method: { type: 'string', description: 'only "none" (the default): public clients with PKCE, no secret' },
            application_type: { type: 'string', description: '"web" (the default) or "native"' },
            scope: { type: 'string', description: 'only "mcp"' },
            client_uri: { type: 'string', description: 'an http(s) URL shown on the consent page' },
            software_id: { type: 'string', description: 'at most 200 characters' },
            software_version: { type: 'string', description: 'at most 200 characters' },
          },
        },
        response: { 201: { ...clientReply, description: 'the client, registered' }, 400: { ...oauthErrorSchema, description: 'invalid client metadata (`invalid_client_metadata`, `invalid_redirect_uri`)' } },
      },
    },
    async (request, reply) => reply.status(201).header('cache-control', 'no-store').send(await oauth.registerClient(request.body, { correlationId: String(request.id) })),
  );

  app.get<{ Querystring: OAuthParams }>(
    OAUTH_PATHS.authorize,
    {
      schema: {
        tags: ['oauth'],
        summary: 'Authorization endpoint: the login or consent page for a PKCE (S256) authorization request',
        querystring: authorizeQuery,
        produces: ['text/html'],
        response: {
          200: { ...htmlReply, description: 'the login page, or the consent page for a signed-in user' },
          302: { type: 'null', description: 'an error sent back to the registered redirect URI' },
          400: { ...htmlReply, description: 'an error page: an unknown client, a redirect URI it did not register, or a malformed query (no error can go back to the client)' },
        },
      },
      // Checked by the handler: without a known client and redirect URI the answer is an error page, otherwise a redirect with the error.
      config: { requiredQuery: ['response_type', 'client_id', 'redirect_uri', 'code_challenge', 'code_challenge_method'] },
    },
    async (request, reply) => {
      const check = await oauth.checkAuthorizationRequest(request.query, issuerOf(config, request));
      if (!check.ok) {
        if (check.redirectUri === null) return sendErrorPage(reply, 400, check.error);
        return redirectWith(reply, request, check.redirectUri, { error: check.error.code, error_description: check.error.description, state: check.state });
      }
      // `prompt=login` (OpenID Connect's, also what the consent page's "use another account" sends) asks for the login form even when signed in.
      const user = request.query.prompt === 'login' ? null : await loggedInUser(request);
      if (!user) return renderLogin(reply, request, 200, check.client, check.request);
      return renderConsent(reply, request, check.client, check.request, user.email);
    },
  );

  app.post<{ Body: FormBody & { email?: string; password?: string } }>(
    OAUTH_PATHS.login,
    {
      schema: {
        tags: ['oauth'],
        summary: 'The login form of the authorization page: on success, the consent page',
        consumes: ['application/x-www-form-urlencoded'],
        body: { type: 'object', properties: { email: { type: 'string', maxLength: 320 }, password: { type: 'string', maxLength: 1024 }, ...formFields } },
        produces: ['text/html'],
        response: {
          200: { ...htmlReply, description: 'signed in: the consent page' },
          400: {
            ...htmlReply,
            description:
              'the login page again after a wrong e-mail or password; or an error page: a malformed form, an authorization request altered, expired or answered already, a client that no longer lists the redirect URI',
          },
          403: { ...htmlReply, description: 'an error page: the form lacks its CSRF token or the token does not match this browser' },
          415: { ...htmlReply, description: 'an error page: a body that is not a form' },
        },
      },
    },
    async (request, reply) => {
      const form = await formContext(request, reply);
      if (!form) return reply;
      const email = request.body.email ?? '';
      try {
        const user = await oauth.login({ email, password: request.body.password ?? '' });
        setAuthorizeCookie(reply, LOGIN_COOKIE, signed.sign('login', { uid: user.id }, LOGIN_TTL_MS), LOGIN_TTL_MS / 1000);
        return renderConsent(reply, request, form.client, form.authorization, user.email);
      } catch (error) {
        if (!(error instanceof AuthenticationError)) throw error;
        // A failed sign-in answered with the page again, not a 401: the per-account limit counts it all the same.
        request.signInFailed = true;
        return renderLogin(reply, request, 400, form.client, form.authorization, { error: 'Wrong email or password.', email });
      }
    },
  );

  app.post<{ Body: FormBody & { decision?: string } }>(
    OAUTH_PATHS.authorize,
    {
      schema: {
        tags: ['oauth'],
        summary: 'The consent decision: 302 to the redirect URI with code, state and iss, or error=access_denied',
        consumes: ['application/x-www-form-urlencoded'],
        body: { type: 'object', properties: { decision: { type: 'string', maxLength: 64, description: '"approve" grants the request; any other value (the form sends "deny") or none denies it' }, ...formFields } },
        produces: ['text/html'],
        response: {
          200: { ...htmlReply, description: 'the login page again, when the session behind the consent page has ended' },
          302: { type: 'null', description: 'to the redirect URI: with code, state and iss when approved, with error=access_denied when denied' },
          400: {
            ...htmlReply,
            description: 'an error page: a malformed form, an authorization request altered, expired or answered already, a client that no longer lists the redirect URI',
          },
          403: { ...htmlReply, description: 'an error page: the form lacks its CSRF token or the token does not match this browser' },
          415: { ...htmlReply, description: 'an error page: a body that is not a form' },
        },
      },
    },
    async (request, reply) => {
      const form = await formContext(request, reply);
      if (!form) return reply;
      const { authorization } = form;
      const user = await loggedInUser(request);
      if (!user) return renderLogin(reply, request, 200, form.client, authorization, { error: 'Your sign-in has expired. Sign in again.' });
      // Every form carrying this request was signed before now, so none verifies after this.
      const openUntil = new Date(Date.now() + FORM_TTL_MS);
      try {
        if (request.body.decision !== 'approve') {
          await oauth.deny(authorization, openUntil);
          return redirectWith(reply, request, authorization.redirect_uri, { error: 'access_denied', error_description: 'the user denied the request', state: authorization.state });
        }
        const { code } = await oauth.approve(user.id, authorization, openUntil);
        return redirectWith(reply, request, authorization.redirect_uri, { code, state: authorization.state });
      } catch (error) {
        // Answered already (a replay, or the other of two posts at once): a page, as for the
        // other bad forms; the client had its answer, so nothing more goes to it.
        if (!(error instanceof OAuthError)) throw error;
        return sendErrorPage(reply, 400, error);
      }
    },
  );

  app.post<{ Body: OAuthParams }>(
    OAUTH_PATHS.token,
    {
      schema: {
        tags: ['oauth'],
        summary: 'Token endpoint: authorization_code (PKCE S256) or refresh_token (rotated) for a Bearer access token',
        consumes: ['application/x-www-form-urlencoded'],
        body: tokenBody,
        response: {
          200: { ...tokenReply, description: 'a Bearer access token (and a refresh token that replaces the one sent)' },
          400: { ...oauthErrorSchema, description: "RFC 6749's error: a malformed request, or a code or refresh token that is not valid for this client (or a code_verifier that does not match)" },
          401: { ...oauthErrorSchema, description: '`invalid_client`: the client tried to authenticate (a public client sends client_id in the form and no Authorization header)' },
        },
      },
    },
    async (request, reply) => {
      reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
      if (!isFormEncoded(request)) throw new OAuthError('invalid_request', 'the token request must be application/x-www-form-urlencoded');
      return oauth.token(request.body, issuerOf(config, request));
    },
  );

  app.post<{ Body: OAuthParams }>(
    OAUTH_PATHS.revoke,
    {
      schema: {
        tags: ['oauth'],
        summary: 'Token revocation (RFC 7009): revokes the authorization of a refresh or access token; 200 even for unknown tokens',
        consumes: ['application/x-www-form-urlencoded'],
        body: { type: 'object', properties: { token: stringParam, token_type_hint: stringParam, client_id: stringParam } },
        response: {
          200: { type: 'null', description: 'the token is revoked, or was unknown' },
          400: { ...oauthErrorSchema, description: '`invalid_request`: a request that is not a form or lacks its token' },
          401: { ...oauthErrorSchema, description: '`invalid_client`: the client tried to authenticate (a public client sends client_id in the form and no Authorization header)' },
        },
      },
    },
    async (request, reply) => {
      reply.header('cache-control', 'no-store');
      if (!isFormEncoded(request)) throw new OAuthError('invalid_request', 'the revocation request must be application/x-www-form-urlencoded');
      await oauth.revoke(request.body);
      return reply.status(200).send();
    },
  );
};
