import type { AppContext } from '../app/appContext.js';
import { authorizeSystem } from '../app/access.js';
import type { Principal } from '../auth/rbac.js';

/** Projection health for administrators: each read model's position, the log head, the lag, the state. */
export async function projectionStatus(deps: Pick<AppContext, 'projections'>) {
  return (await deps.projections.status()).map(({ lastError, ...status }) => ({ ...status, last_error: lastError }));
}

/**
 * A rebuild empties its read model before it replays the log: until it ends, "not found" may only
 * mean "not re-applied yet". The transports answer such a failure as unavailable for now (REST
 * 503 with Retry-After, an MCP tool `unavailable: …`) when this names any read model.
 */
export async function rebuildingReadModels(deps: { projections: Pick<AppContext['projections'], 'status'> }): Promise<string[]> {
  return (await deps.projections.status()).filter((projection) => projection.state === 'rebuilding').map((projection) => projection.name);
}

/** The message of a not-found failure met while `rebuilding` are rebuilt. */
export function notFoundDuringRebuild(message: string, rebuilding: readonly string[]): string {
  const plural = rebuilding.length > 1;
  return `${message} while read model${plural ? 's' : ''} ${rebuilding.join(', ')} ${plural ? 'are' : 'is'} being rebuilt: it may not be re-applied yet; retry after the rebuild`;
}

export function projectionQueries(deps: Pick<AppContext, 'projections'>) {
  return {
    async status(principal: Principal) {
      authorizeSystem(principal, 'projections:read');
      return { projections: await projectionStatus(deps) };
    },
  };
}
