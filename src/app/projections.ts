import type { Principal } from '../auth/rbac.js';
import { ProjectionRebuildTakenOverError } from '../projection/busRunner.js';
import { ProjectionRebuildStoppedError } from '../projection/runner.js';
import { projectionStatus } from '../read/projections.js';
import { authorizeSystem } from './access.js';
import type { AppContext } from './context.js';
import { conflict, notFound } from './errors.js';

/** Projection commands: rebuilding a read model from position 0. */
export function projectionCommands(deps: Pick<AppContext, 'projections' | 'log'>) {
  return {
    /** Starts the rebuild and answers at once; progress shows in the projection status. */
    async rebuild(principal: Principal, input: { name: string }) {
      authorizeSystem(principal, 'projections:manage');
      const status = (await projectionStatus(deps)).find((projection) => projection.name === input.name);
      if (!status) throw notFound('projection');
      // Its rebuild would only fail in the background while this answered 202.
      // A distributed tier's rebuild whose node stopped says so in last_error (a consuming node takes it over).
      if (status.state === 'rebuilding') throw conflict(`projection ${input.name} is already rebuilding; follow it in GET /projections${status.last_error ? ` (${status.last_error})` : ''}`);
      deps.projections.rebuild(input.name).catch((error: unknown) => {
        // Stopped by the shutdown: its rows and checkpoint agree, and it goes on (error.goesOn says how).
        if (error instanceof ProjectionRebuildStoppedError) {
          deps.log.warn({ projection: input.name }, `rebuild stopped before its end (the service is shutting down); ${error.goesOn}`);
        } else if (error instanceof ProjectionRebuildTakenOverError) {
          // The runner has logged it; the other node's rebuild goes on.
          deps.log.warn({ projection: input.name, by: error.by }, 'rebuild taken over by another node, which took it for stopped; that rebuild goes on');
        } else deps.log.error({ err: error, projection: input.name }, 'rebuild failed');
      });
      // As the rebuild has it from its start: from position 0, the whole log to replay.
      return { ...status, position: 0, lag: status.head, state: 'rebuilding' };
    },
  };
}
