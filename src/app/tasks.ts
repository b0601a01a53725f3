import type { Principal } from '../auth/rbac.js';
import { isSuperseded } from '../pipeline/jobs.js';
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
      if (job.sourceId !== null && (job.state === 'failed' || job.state === 'dead')) {
        // The stages do nothing for a failed source, so the task would "succeed" at once and its failure be lost.
        const source: { status: string } | undefined = await deps.db.knex('sources').where({ id: job.sourceId }).first('status');
        if (source?.status === 'failed') throw conflict(`the task's source failed: retry the source (POST .../sources/${job.sourceId}/retry), which starts it over`);
        const { jobs } = await deps.jobs.list({ repositoryId: repository.id, sourceId: job.sourceId, kind: job.kind, limit: 1000 });
        if (isSuperseded(job, jobs)) throw conflict('a later task of this kind took this one\'s place (its source started over): nothing to retry');
      }
      const result = await deps.jobs.retry(job.id);
      if (result.status === 'not_found') throw notFound('task');
      if (result.status === 'not_retryable') throw conflict(`task is ${result.job.state}; only failed or dead tasks can be retried`);
      deps.wakeWorkers();
      return presentJob(result.job);
    },
  };
}
