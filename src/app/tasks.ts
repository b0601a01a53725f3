import type { Principal } from '../auth/rbac.js';
import { presentJob } from '../read/present.js';
import { loadTask, type TaskInput } from '../read/tasks.js';
import { authorizeRepository } from './access.js';
import type { AppContext } from './context.js';
import { conflict, notFound } from './errors.js';

/** Task commands: retrying a failed or dead job. */
export function taskCommands(deps: Pick<AppContext, 'db' | 'jobs' | 'wakeWorkers'>) {
  return {
    async retry(principal: Principal, input: TaskInput) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'jobs:write');
      const job = await loadTask(deps.jobs, repository.id, input.task);
      const result = await deps.jobs.retry(job.id);
      if (result.status === 'not_found') throw notFound('task');
      if (result.status === 'not_retryable') throw conflict(`task is ${result.job.state}; only failed or dead tasks can be retried`);
      deps.wakeWorkers();
      return presentJob(result.job);
    },
  };
}

export type TaskCommands = ReturnType<typeof taskCommands>;
