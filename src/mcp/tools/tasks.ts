import { z } from 'zod';
import type { Application } from '../../app/application.js';
import { invalid } from '../../app/errors.js';
import { TASK_KINDS } from '../../config/types.js';
import { jobStates } from '../../pipeline/jobs.js';
import { defineTool, idArgument, repositoryArgument } from './common.js';

const taskFilters = {
  state: z.enum(jobStates).optional().describe(`Only tasks in this state (${jobStates.join(', ')}).`),
  kind: z.enum(TASK_KINDS).optional().describe(`Only tasks of this kind (${TASK_KINDS.join(', ')}).`),
  byKind: z.boolean().optional().describe('Also return `by_kind`: task counts per kind and state (default false).'),
  verbose: z.boolean().optional().describe('Return every field of each task (attempts, errors, times) rather than id, kind, state and error (default false).'),
  limit: z.number().int().min(1).max(500).optional().describe('Tasks per page (1 to 500; default 50).'),
  cursor: z.string().max(200).optional().describe('The `next_cursor` of the previous page: where it ended, so tasks that changed state or were added meanwhile are neither skipped nor repeated.'),
};

type TaskFilters = { state?: (typeof jobStates)[number]; kind?: (typeof TASK_KINDS)[number]; byKind?: boolean; verbose?: boolean; limit?: number; cursor?: string };

/** The subset of a task list a tool answers with: `complete` first, compact items unless verbose. */
function taskPage(page: Awaited<ReturnType<Application['tasks']['list']>>, filters: TaskFilters) {
  return {
    complete: page.complete,
    total: page.total,
    tasks: filters.verbose ? page.items : page.items.map(({ id, kind, state, source_id, report_id, last_error }) => ({ id, kind, state, source_id, report_id, last_error })),
    ...(filters.byKind ? { by_kind: page.counts } : {}),
    next_cursor: page.next_cursor,
  };
}

/** The list input the filters make: a page of 50 unless `limit` says. */
const listFilters = (filters: TaskFilters) => ({ state: filters.state, kind: filters.kind, limit: filters.limit ?? 50, cursor: filters.cursor });

/** Background tasks: whether a source, investigation or report is done being processed. */
export const taskTools = [
  defineTool({
    name: 'getSourceTasks',
    title: "Get a source's processing tasks",
    description:
      'The background tasks (fetch, decomposition into facts, embedding, concepts) of one source (`sourceId`) or of every source of an investigation ' +
      '(`investigationId`); give one, not both. `complete` is true once nothing is queued or running: then its facts are searchable.',
    input: z.object({ repository: repositoryArgument, sourceId: idArgument('source').optional(), investigationId: idArgument('investigation').optional(), ...taskFilters }),
    readOnly: true,
    async run({ app, principal }, args) {
      if ((args.sourceId === undefined) === (args.investigationId === undefined)) throw invalid('give sourceId or investigationId (one of them)');
      const page = await app.tasks.list(principal, { repository: args.repository, source_id: args.sourceId, investigation_id: args.investigationId, ...listFilters(args) });
      return taskPage(page, args);
    },
  }),
  defineTool({
    name: 'getReportTasks',
    title: "Get a report's annotation tasks",
    description: "The background tasks that annotate a report's sentences with facts. `complete` is true once nothing is queued or running: then getReport shows the annotations.",
    input: z.object({ repository: repositoryArgument, reportId: idArgument('report'), ...taskFilters }),
    readOnly: true,
    async run({ app, principal }, args) {
      return taskPage(await app.tasks.reportTasks(principal, { repository: args.repository, report_id: args.reportId, ...listFilters(args) }), args);
    },
  }),
];
