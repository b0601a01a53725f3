import { z } from 'zod';
import { invalid } from '../../app/errors.js';
import { TASK_KINDS } from '../../config/types.js';
import { jobStates } from '../../pipeline/jobs.js';
import type { ToolCall } from './common.js';
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

/** One page of tasks through the tasks query, shaped for a model: `complete` first, compact items unless verbose. */
async function taskPage({ app, principal }: ToolCall, repository: string, subject: { source_id?: string; investigation_id?: string; report_id?: string }, filters: TaskFilters) {
  const limit = filters.limit ?? 50;
  const page = await app.tasks.list(principal, { repository, ...subject, state: filters.state, kind: filters.kind, limit, cursor: filters.cursor });
  return {
    complete: page.complete,
    total: page.total,
    tasks: filters.verbose ? page.items : page.items.map(({ id, kind, state, source_id, report_id, last_error }) => ({ id, kind, state, source_id, report_id, last_error })),
    ...(filters.byKind ? { by_kind: page.counts } : {}),
    next_cursor: page.next_cursor,
  };
}

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
    async run(call, args) {
      if ((args.sourceId === undefined) === (args.investigationId === undefined)) throw invalid('give sourceId or investigationId (one of them)');
      return taskPage(call, args.repository, { source_id: args.sourceId, investigation_id: args.investigationId }, args);
    },
  }),
  defineTool({
    name: 'getReportTasks',
    title: "Get a report's annotation tasks",
    description: "The background tasks that annotate a report's sentences with facts. `complete` is true once nothing is queued or running: then getReport shows the annotations.",
    input: z.object({ repository: repositoryArgument, reportId: idArgument('report'), ...taskFilters }),
    readOnly: true,
    async run(call, args) {
      await call.app.reports.get(call.principal, { repository: args.repository, report: args.reportId });
      return taskPage(call, args.repository, { report_id: args.reportId }, args);
    },
  }),
];
