import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { invalid, notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { jobStates, type JobCounts, type JobRecord } from '../pipeline/jobs.js';
import type { JobState } from '../pipeline/types.js';
import { investigationSourceIds, loadInvestigation } from './investigations.js';
import { loadReport, reportQueries } from './reports.js';
import { loadSource } from './sources.js';
import { decodeTaskCursor, encodeTaskCursor, pageOf, type PageInput } from './paging.js';
import { presentJob } from './present.js';

/** Nothing queued or running among the counted jobs. */
function nothingPending(counts: JobCounts): boolean {
  return Object.values(counts).every((byState) => byState.queued === 0 && byState.running === 0);
}

function sameCounts(a: JobCounts, b: JobCounts): boolean {
  const kinds = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...kinds].every((kind) => jobStates.every((state) => (a[kind]?.[state] ?? 0) === (b[kind]?.[state] ?? 0)));
}

/** How long a completeness check waits for the read models to reach the log's head before it answers "not yet". */
const CATCH_UP_WAIT_MS = 1_000;

/**
 * The jobs `countJobs` counts, and whether they are done for good. Nothing queued or running is
 * not enough: a job that just finished has its follow-up enqueued only when the job intake, a
 * projection, applies the events it appended. So: nothing pending; then every projection has
 * applied the log through its committed head as read after that (the follow-ups are enqueued, the read
 * models show the results); then the same counts again. Each job finished before the first read
 * appended before the head was read, so its follow-ups were enqueued before the second read; and
 * equal counts mean no job was enqueued, claimed or finished in between.
 */
async function countsAndCompleteness(
  deps: Pick<AppContext, 'store' | 'projections'>,
  countJobs: () => Promise<JobCounts>,
): Promise<{ counts: JobCounts; complete: boolean }> {
  const counts = await countJobs();
  if (!nothingPending(counts)) return { counts, complete: false };
  // Committed, not only readable: a job's last events held back from readers (an older transaction
  // elsewhere on a server) have not enqueued its follow-ups yet, though the job shows as done.
  const head = await (deps.store.committedHeadPosition?.() ?? deps.store.headPosition());
  if (!(await deps.projections.caughtUp(head, CATCH_UP_WAIT_MS))) return { counts, complete: false };
  return { counts, complete: sameCounts(counts, await countJobs()) };
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
  /**
   * The `next_cursor` of the previous page (not with `offset`): the next page starts after the
   * last task it listed, so a task that left the `state` filter, or was added, between the pages
   * is neither skipped nor repeated.
   */
  cursor?: string;
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
/** Whether no task is counted in any kind and state. */
const isEmpty = (counts: JobCounts) => Object.values(counts).every((byState) => Object.values(byState).every((count) => count === 0));

export function taskQueries(deps: Pick<AppContext, 'db' | 'jobs' | 'store' | 'projections'>) {
  const knex = deps.db.knex;
  const reports = reportQueries(deps);
  const queries = {
    async list(principal: Principal, input: TaskListInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      const { source_id: sourceId, investigation_id: investigationId, report_id: reportId, state, kind } = input;
      if (investigationId !== undefined && sourceId !== undefined) throw invalid('give source_id or investigation_id, not both');
      // A report's tasks work for no source: with either, the filters match nothing, and `complete`
      // would answer true at once to a poller waiting for the report.
      if (reportId !== undefined && (sourceId !== undefined || investigationId !== undefined)) {
        throw invalid(`report_id names a report, whose tasks work for no source: give it without ${sourceId !== undefined ? 'source_id' : 'investigation_id'}`);
      }
      const sourceIds =
        investigationId === undefined ? undefined : await investigationSourceIds(knex, (await loadInvestigation(knex, repository.id, investigationId)).id);
      const after = decodeTaskCursor(input.cursor);
      if (after !== null && input.offset !== undefined) throw invalid('give offset or cursor, not both');
      const list = await deps.jobs.list({ repositoryId: repository.id, sourceId, sourceIds, reportId, state, kind, ...pageOf(input), ...(after === null ? {} : { after }) });
      // Counts and completeness cover the source, investigation or report (or repository) whatever the state/kind filters.
      const scope = { repositoryId: repository.id, sourceId, sourceIds, reportId };
      const { counts, complete: jobsComplete } = await countsAndCompleteness(deps, () => deps.jobs.countsFor(scope));
      // A subject with no task at all that does not exist is a wrong id, not a finished one (a
      // caller polling `complete` would stop at once); a deleted source's tasks stay listed.
      if (isEmpty(counts)) {
        if (sourceId !== undefined) await loadSource(knex, repository.id, sourceId);
        if (reportId !== undefined) await loadReport(knex, repository.id, reportId);
      }
      // An investigation's source still being added (its first job not enqueued yet) is not done either.
      const complete =
        jobsComplete &&
        (sourceIds === undefined || sourceIds.length === 0 || (await knex('sources').whereIn('id', sourceIds).whereNotIn('status', ['processed', 'failed']).first('id')) === undefined);
      return { items: list.jobs.map(presentJob), total: list.total, counts, complete, next_cursor: list.next === null ? null : encodeTaskCursor(list.next) };
    },

    async stats(principal: Principal, input: { repository: string }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      const { counts, complete } = await countsAndCompleteness(deps, () => deps.jobs.countsFor({ repositoryId: repository.id }));
      return { counts, totals: totalsByState(counts), complete };
    },

    async get(principal: Principal, input: TaskInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'jobs:read');
      return presentJob(await loadTask(deps.jobs, repository.id, input.task));
    },
  };

  return {
    ...queries,

    /**
     * A report's tasks (MCP's getReportTasks): the report is read first, so the caller needs
     * `reports:read` besides the list's `jobs:read`, as reading the report asks (docs/mcp.md).
     */
    async reportTasks(principal: Principal, input: Omit<TaskListInput, 'source_id' | 'investigation_id'> & { report_id: string }) {
      await reports.get(principal, { repository: input.repository, report: input.report_id });
      return queries.list(principal, input);
    },
  };
}
