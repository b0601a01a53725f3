import { errors as openSearchErrors } from '@opensearch-project/opensearch';
import { SearchUnavailableError } from '../port.js';
import { errorMessage } from '../../util/errorMessage.js';

/** Bulk items OpenSearch rejected for good (not back-pressure), with their reasons. */
export class SearchIndexWriteError extends Error {
  constructor(
    message: string,
    readonly failures: { id: string; status: number; reason: string }[],
  ) {
    super(message);
    this.name = 'SearchIndexWriteError';
  }
}

export function errorStatus(error: unknown): number | undefined {
  return error instanceof openSearchErrors.ResponseError ? error.statusCode : undefined;
}

export function errorType(error: unknown): string | undefined {
  if (!(error instanceof openSearchErrors.ResponseError)) return undefined;
  const body = error.body as { error?: { type?: string } } | undefined;
  return body?.error?.type;
}

/** A failure in one line for logs and error messages: status, type and reason when OpenSearch gave them. */
export function describe(error: unknown): string {
  if (error instanceof openSearchErrors.ResponseError) {
    const body = error.body as { error?: { type?: string; reason?: string } } | undefined;
    return `${error.statusCode} ${body?.error?.type ?? ''}: ${body?.error?.reason ?? error.message}`;
  }
  return errorMessage(error);
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A failure to reach the cluster at all (refused, no living node, timed out) as the error
 * callers can tell apart; any other error as it is.
 */
export function unreachableAsUnavailable(error: unknown): unknown {
  const unreachable =
    error instanceof openSearchErrors.ConnectionError || error instanceof openSearchErrors.NoLivingConnectionsError || error instanceof openSearchErrors.TimeoutError;
  return unreachable ? new SearchUnavailableError(describe(error), { cause: error }) : error;
}
