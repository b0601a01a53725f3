import { z } from 'zod';
import { invalid } from '../../app/errors.js';
import { MAX_REPORT_BYTES, MAX_REPORT_TITLE_CHARS, MAX_REPORT_TOPIC_CHARS } from '../../domain/report/decider.js';
import { reportStatuses } from '../../read/reports.js';
import { defineTool, idArgument, limitArgument, offsetArgument, repositoryArgument, textOfAtMost } from './common.js';

const reportText = z
  .string()
  .min(1)
  .max(MAX_REPORT_BYTES)
  .describe(`The report text (Markdown or plain text), at most ${MAX_REPORT_BYTES} bytes of UTF-8 (256 KiB); each sentence is annotated with the facts that support or contradict it.`);
const reportTopic = textOfAtMost(MAX_REPORT_TOPIC_CHARS).optional().describe('What the report is about.');
const childrenIds = z.array(idArgument('report')).max(100).optional().describe('Reports to make children of this one (replaces its current children).');

/** Reports: texts the service annotates, sentence by sentence, with the facts that bear on them. */
export const reportTools = [
  defineTool({
    name: 'createReport',
    title: 'Create a report',
    description:
      'Creates a report from `text`; the service then annotates each sentence with the facts that support or contradict it (poll getReportTasks, then getReport). ' +
      'Optional parent (`parentId`) and children (`childrenIds`) nest reports. Needs editor or owner.',
    input: z.object({
      repository: repositoryArgument,
      title: textOfAtMost(MAX_REPORT_TITLE_CHARS).min(1).optional().describe('The title; by default the first line of the text.'),
      text: reportText,
      topic: reportTopic,
      parentId: idArgument('parent report').optional(),
      childrenIds,
    }),
    readOnly: false,
    idempotent: { permission: 'reports:create' },
    async run(call, args) {
      // One command: children that cannot be taken are refused before the report is made.
      return call.app.reports.create(
        call.principal,
        { repository: args.repository, title: args.title, text: args.text, topic: args.topic, parent_id: args.parentId, children_ids: args.childrenIds },
        call.trace,
      );
    },
  }),
  defineTool({
    name: 'getReport',
    title: 'Get a report with its annotations',
    description: "One report (text, status, children) and its annotated sentences, each with the facts (id, content, score, posture: supports, contradicts or related) found for it; a fact merged since is shown as its survivor, with `merged_from` the cited ids that led there.",
    input: z.object({ repository: repositoryArgument, reportId: idArgument('report') }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.reports.withAnnotations(principal, { repository: args.repository, report: args.reportId });
    },
  }),
  defineTool({
    name: 'listReports',
    title: 'List reports',
    description: 'The reports of a repository, newest first, or best match first with `search` (web-search syntax over title and text). Items leave the text out.',
    input: z.object({
      repository: repositoryArgument,
      search: textOfAtMost(1000).optional().describe('Web-search syntax over title and text.'),
      status: z.enum(reportStatuses).optional().describe(`Only reports in this annotation status (${reportStatuses.join(', ')}).`),
      limit: limitArgument(50, 500),
      offset: offsetArgument,
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.reports.list(principal, { repository: args.repository, query: args.search, status: args.status, limit: args.limit, offset: args.offset });
    },
  }),
  defineTool({
    name: 'updateReport',
    title: 'Update a report',
    description:
      'Changes any of the text, title, topic, parent and children of a report (at least one); what is left out stays. Changed sentences are annotated again. ' +
      '`parentId` "" removes the parent. Needs editor or owner.',
    input: z.object({
      repository: repositoryArgument,
      reportId: idArgument('report'),
      title: textOfAtMost(MAX_REPORT_TITLE_CHARS).min(1).optional().describe('A new title.'),
      text: reportText.optional().describe(`The new text (Markdown or plain text, at most ${MAX_REPORT_BYTES} bytes of UTF-8); left out, the text stays.`),
      topic: reportTopic,
      parentId: z.string().max(200).optional().describe('The new parent report id; "" removes the parent.'),
      childrenIds,
    }),
    readOnly: false,
    async run(call, args) {
      const fields = {
        title: args.title,
        text: args.text,
        topic: args.topic,
        parent_id: args.parentId === undefined ? undefined : args.parentId === '' ? null : args.parentId,
      };
      const changesFields = Object.values(fields).some((value) => value !== undefined);
      // As PUT .../reports/{id} (minProperties 1): a call that changes nothing is a mistake, said.
      if (!changesFields && args.childrenIds === undefined) throw invalid('give at least one of text, title, topic, parentId or childrenIds');
      const named = { repository: args.repository, report: args.reportId };
      // Children alone are set by their own commands: the report itself is not changed. With fields,
      // one command checks both before either is written.
      if (!changesFields) return call.app.reports.setChildren(call.principal, { ...named, children_ids: args.childrenIds ?? [] }, call.trace);
      return call.app.reports.update(call.principal, { ...named, ...fields, children_ids: args.childrenIds }, call.trace);
    },
  }),
];
