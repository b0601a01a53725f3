import type { AppContext } from '../app/context.js';
import { authorizeRepository } from '../app/access.js';
import { invalid, notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { jobStates, type JobCounts, type JobRecord } from '../pipeline/jobs.js';
import type { JobState } from '../pipeline/types.js';
import { investigationSourceIds, loadInvestigation } from './investigations.js';
import { pageOf, type PageInput } from './paging.js';
import { presentJob } from './present.js';

/** Nothing queued or running among the counted jobs. */
function nothingPending(counts: JobCounts): boolean {
  return Object.values(counts).every((byState) => byState.queued === 0 && byState.running === 0);
}

function totalsByState(counts: JobCounts): Record<JobState, number> {
  const totals = Object.fromEntries(jobStates.map((state) => [state, 0])) as Record<JobState, number>;
  for (const byState of Object.values(counts)) for (const state of jobStates) totals[state] += byState[state] ?? 0;
  return totals;
}

export interface TaskListInput extends PageInput {
  repository: string;
  source_id?: string;
  /** The tasks of an investigation's sources; not with `source_id`. */
  investigation_id?: string;
  report_id?: string;
  state?: JobState;
  kind?: string;
}

export interface TaskInput {
  repository: string;
  task: string;
}

/** A task (job) of the repository, or `not_found`: a job of another repository is not there. */
export async function loadTask(jobs: AppContext['jobs'], repositoryId: string, taskId: string): Promise<JobRecord> {
  const job = await jobs.get(taskId);
  if (!job || job.repositoryId !== repositoryId) throw notFound('task');
  return job;
}

/**
 * Task queries: the background jobs of a repository (one per pipeline job, docs/pipeline.md),
 * their counts per kind and state, and whether a source, investigation or report is done.
 */
export function taskQueries(deps: Pick<AppContext, 'db' | 'jobs'>) {
  const knex = deps.db.knex;
  return {
    async list(principal: Principal, input: TaskListInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      const { source_id: sourceId, investigation_id: investigationId, report_id: reportId, state, kind } = input;
      if (investigationId !== undefined && sourceId !== undefined) throw invalid('give source_id or investigation_id, not both');
      const sourceIds =
        investigationId === undefined ? undefined : await investigationSourceIds(knex, (await loadInvestigation(knex, repository.id, investigationId)).id);
      const list = await deps.jobs.list({ repositoryId: repository.id, sourceId, sourceIds, reportId, state, kind, ...pageOf(input) });
      // Counts and completeness cover the source, investigation or report (or repository) whatever the state/kind filters.
      const counts = await deps.jobs.countsFor({ repositoryId: repository.id, sourceId, sourceIds, reportId });
      let complete: boolean;
      if (sourceId !== undefined && reportId === undefined) complete = await deps.jobs.isComplete({ repositoryId: repository.id, sourceId });
      else if (sourceIds !== undefined) {
        // Between two stages a source has no job queued for a moment: its status says it is not done.
        const unfinished = sourceIds.length === 0 ? undefined : await knex('sources').whereIn('id', sourceIds).whereNotIn('status', ['processed', 'failed']).first('id');
        complete = nothingPending(counts) && unfinished === undefined;
      } else complete = nothingPending(counts);
      return { items: list.jobs.map(presentJob), total: list.total, counts, complete };
    },

    async stats(principal: Principal, input: { repository: string }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      const counts = await deps.jobs.countsFor({ repositoryId: repository.id });
      return { counts, totals: totalsByState(counts), complete: nothingPending(counts) };
    },

    async get(principal: Principal, input: TaskInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      return presentJob(await loadTask(deps.jobs, repository.id, input.task));
    },
  };
}

export type TaskQueries = ReturnType<typeof taskQueries>;
