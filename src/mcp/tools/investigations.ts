import { z } from 'zod';
import { MAX_INVESTIGATION_TITLE_CHARS, MAX_INVESTIGATION_TOPIC_CHARS } from '../../domain/investigation/decider.js';
import { MAX_PAGE } from '../../read/paging.js';
import { defineTool, idArgument, limitArgument, offsetArgument, repositoryArgument, textOfAtMost } from './common.js';

/** Investigations: sources gathered around a question. */
export const investigationTools = [
  defineTool({
    name: 'getInvestigation',
    title: 'Get an investigation',
    description:
      'One investigation (title, topic, `source_count`) with a page of its sources (id, url, title, status) in the order they were added: ' +
      'the first 100 unless `limit` and `offset` say otherwise (an investigation holds up to 1,000).',
    input: z.object({
      repository: repositoryArgument,
      investigationId: idArgument('investigation'),
      limit: limitArgument(100, MAX_PAGE).describe(`How many of its sources to return (1 to ${MAX_PAGE}; default 100).`),
      offset: offsetArgument.describe('How many of its sources to skip, for the next page (default 0).'),
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.investigations.withSources(principal, { repository: args.repository, investigation: args.investigationId, limit: args.limit ?? 100, offset: args.offset });
    },
  }),
  defineTool({
    name: 'createInvestigation',
    title: 'Create an investigation',
    description: 'Starts an investigation: a titled question to gather sources for (then use fetchAndProcessSource or addInvestigationSource). Needs editor or owner.',
    input: z.object({
      repository: repositoryArgument,
      title: textOfAtMost(MAX_INVESTIGATION_TITLE_CHARS).min(1).describe('A short title.'),
      topic: textOfAtMost(MAX_INVESTIGATION_TOPIC_CHARS).optional().describe('The question or topic the investigation gathers sources for.'),
    }),
    readOnly: false,
    idempotent: { permission: 'investigations:create' },
    async run({ app, principal, trace }, args) {
      return app.investigations.create(principal, args, trace);
    },
  }),
  defineTool({
    name: 'addInvestigationSource',
    title: 'Add a source to an investigation',
    description: 'Adds a source the repository already has (by id, e.g. from searchSources) to an investigation. `added` is false when it was already there. Needs editor or owner.',
    input: z.object({ repository: repositoryArgument, investigationId: idArgument('investigation'), sourceId: idArgument('source') }),
    readOnly: false,
    async run({ app, principal, trace }, args) {
      return app.investigations.addSource(principal, { repository: args.repository, investigation: args.investigationId, source_id: args.sourceId }, trace);
    },
  }),
];
