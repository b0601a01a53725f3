import type { Principal } from '../auth/rbac.js';
import { repositoryDecider } from '../domain/repository/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { jobIdFor } from '../pipeline/jobs.js';
import { presentJob } from '../read/present.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './context.js';
import { conflict } from './errors.js';

/** Concept commands: moving a repository's concepts from one context to another (a background task). */
export function conceptCommands(deps: Pick<AppContext, 'db' | 'commands' | 'store' | 'jobs'>) {
  return {
    /** Requests the migration; the answer names the migrate_context task that carries it out. */
    async migrateContext(principal: Principal, input: { repository: string; from_context: string; to_context: string }, trace?: Trace) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'concepts:write');
      const repositoryStream = streamName('repository', repository.id);
      const result = await deps.commands.execute(
        repositoryStream,
        repositoryDecider,
        { type: 'RequestContextMigration', fromContext: input.from_context, toContext: input.to_context },
        commandMetadata(principal, repository.id, trace),
      );
      if (result.write === null) throw conflict('the migration was not recorded');
      const [requested] = await deps.store.readStream(repositoryStream, { fromVersion: result.write.streamVersion, limit: 1 });
      const data = requested.data as { from_context: string; to_context: string };
      // The job id is derived from (kind, subject, trigger), so it is known before intake inserts the row.
      const taskId = jobIdFor('migrate_context', repository.id, requested.eventId);
      const task = await deps.jobs.get(taskId);
      return { task_id: taskId, task: task ? presentJob(task) : null, from_context: data.from_context, to_context: data.to_context };
    },
  };
}

export type ConceptCommands = ReturnType<typeof conceptCommands>;
