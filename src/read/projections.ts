import type { AppContext } from '../app/context.js';
import { authorizeSystem } from '../app/access.js';
import type { Principal } from '../auth/rbac.js';

/** Projection health for administrators: each read model's position, the log head, the lag, the state. */
export async function projectionStatus(deps: Pick<AppContext, 'projections'>) {
  return (await deps.projections.status()).map(({ lastError, ...status }) => ({ ...status, last_error: lastError }));
}

export function projectionQueries(deps: Pick<AppContext, 'projections'>) {
  return {
    async status(principal: Principal) {
      authorizeSystem(principal, 'projections:read');
      return { projections: await projectionStatus(deps) };
    },
  };
}

export type ProjectionQueries = ReturnType<typeof projectionQueries>;
