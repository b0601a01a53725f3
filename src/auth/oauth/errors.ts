/** The error codes of RFC 6749 5.2 / 4.1.2.1, RFC 7591 3.2.2 and RFC 8707 that this server answers with. */
export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unauthorized_client'
  | 'unsupported_grant_type'
  | 'unsupported_response_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'access_denied'
  | 'invalid_redirect_uri'
  | 'invalid_client_metadata';

/**
 * A refusal in OAuth's own terms. Transports answer it as OAuth says: JSON
 * `{error, error_description}` with 400 from the token, revocation and registration endpoints;
 * a redirect or an HTML page from the authorization endpoint.
 */
export class OAuthError extends Error {
  override readonly name = 'OAuthError';
  constructor(
    readonly code: OAuthErrorCode,
    readonly description: string,
  ) {
    super(`${code}: ${description}`);
  }
}
