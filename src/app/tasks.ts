import type { Principal } from '../auth/rbac.js';
import { isSuperseded } from '../pipeline/jobs.js';
import { streamName } from '../eventstore/envelope.js';
import { presentJob } from '../read/present.js';
import { loadTask, type TaskInput } from '../read/tasks.js';
import { authorizeRepository } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, notFound } from './errors.js';
import { withSourceLock } from './sources.js';

/** Task commands: retrying a failed or dead job. */
export function taskCommands(deps: Pick<AppContext, 'db' | 'jobs' | 'wakeWorkers' | 'store'>) {
  /**
   * Whether the source was deleted after the event that made the task: its deletion's own
   * follow-up (cleanup_facts) is still the deleted source's to retry. Asked of the log, as the
   * read model keeps no row of a deleted source.
   */
  async function deletedBefore(sourceId: string, triggerPosition: number): Promise<boolean> {
    // Its SourceDeleted alone: the stream also holds the source's vectors (FactsEmbedded).
    const [deletion] = await deps.store.readAll({ streamId: streamName('source', sourceId), types: ['SourceDeleted'], limit: 1 });
    return deletion !== undefined && triggerPosition < deletion.globalPosition;
  }

  return {
    async retry(principal: Principal, input: TaskInput) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'jobs:write');
      const job = await loadTask(deps.jobs, repository.id, input.task);
      const requeue = async () => {
        const result = await deps.jobs.retry(job.id);
        if (result.status === 'not_found') throw notFound('task');
        if (result.status === 'not_retryable') throw conflict(`task is ${result.job.state}; only failed or dead tasks can be retried`);
        deps.wakeWorkers();
        return presentJob(result.job);
      };
      if (job.sourceId === null) return requeue();
      const sourceId = job.sourceId;
      // Under the source's lock, as its deletion and retry: beside a deletion, the source was
      // looked at before SourceDeleted and the task queued after it, for a source that is gone.
      return withSourceLock(deps.db, sourceId, async () => {
        const source: { status: string } | undefined = await deps.db.knex('sources').where({ id: sourceId, repository_id: repository.id }).first('status');
        if (source === undefined && (await deletedBefore(sourceId, job.triggerPosition))) {
          throw conflict("the task's source was deleted: nothing to retry (its stages do nothing for a deleted source)");
        }
        if (job.state === 'failed' || job.state === 'dead') {
          // The stages do nothing for a failed source, so the task would "succeed" at once and its failure be lost.
          if (source?.status === 'failed') throw conflict(`the task's source failed: retry the source (POST .../sources/${sourceId}/retry), which starts it over`);
          const { jobs } = await deps.jobs.list({ repositoryId: repository.id, sourceId, kind: job.kind, limit: 1000 });
          if (isSuperseded(job, jobs)) throw conflict('a later task of this kind took this one\'s place (its source started over): nothing to retry');
        }
        return requeue();
      });
    },
  };
}
