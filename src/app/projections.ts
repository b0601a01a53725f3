import type { Principal } from '../auth/rbac.js';
import { ProjectionRebuildTakenOverError } from '../projection/busRunner.js';
import { ProjectionRebuildConflictError, ProjectionRebuildStoppedError } from '../projection/runner.js';
import { projectionStatus } from '../read/projections.js';
import { authorizeSystem } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, notFound } from './errors.js';

/** Projection commands: rebuilding a read model from position 0. */
export function projectionCommands(deps: Pick<AppContext, 'projections' | 'log'>) {
  return {
    /**
     * Starts the rebuild and answers once it has started (its tables emptied), not at its end;
     * progress shows in the projection status. Whether a rebuild is under way is the runner's to
     * say, when it starts: two calls at once get one rebuild and one conflict, and on the
     * distributed tier a rebuild whose node stopped is taken over, as `factlog projections rebuild` does.
     */
    async rebuild(principal: Principal, input: { name: string }) {
      authorizeSystem(principal, 'projections:manage');
      const status = (await projectionStatus(deps)).find((projection) => projection.name === input.name);
      if (!status) throw notFound('projection');
      let started!: () => void;
      const start = new Promise<void>((resolve) => (started = resolve));
      const rebuild = deps.projections.rebuild(input.name, () => started());
      try {
        await Promise.race([start, rebuild]);
      } catch (error) {
        if (error instanceof ProjectionRebuildConflictError) throw conflict(`${error.message}; follow it in GET /projections`);
        throw error;
      }
      rebuild.catch((error: unknown) => {
        // Stopped by the shutdown: its rows and checkpoint agree, and it goes on (error.goesOn says how).
        if (error instanceof ProjectionRebuildStoppedError) {
          deps.log.warn({ projection: input.name }, `rebuild stopped before its end (the service is shutting down); ${error.goesOn}`);
        } else if (error instanceof ProjectionRebuildTakenOverError) {
          // The runner has logged it; the other node's rebuild goes on.
          deps.log.warn({ projection: input.name, by: error.by }, 'rebuild taken over by another node, which took it for stopped; that rebuild goes on');
        } else deps.log.error({ err: error, projection: input.name }, 'rebuild failed');
      });
      // As the rebuild has it from its start: from position 0, the whole log to replay.
      return { ...status, position: 0, lag: status.head, state: 'rebuilding', last_error: null };
    },
  };
}
