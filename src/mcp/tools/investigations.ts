import { z } from 'zod';
import { MAX_INVESTIGATION_TITLE_CHARS, MAX_INVESTIGATION_TOPIC_CHARS } from '../../domain/investigation/decider.js';
import { defineTool, idArgument, repositoryArgument, textOfAtMost } from './common.js';

/** Investigations: sources gathered around a question. */
export const investigationTools = [
  defineTool({
    name: 'getInvestigation',
    title: 'Get an investigation',
    description: 'One investigation (title, topic, source count) with its first 100 sources (id, url, title, status).',
    input: z.object({ repository: repositoryArgument, investigationId: idArgument('investigation') }),
    readOnly: true,
    async run({ app, principal }, args) {
      const named = { repository: args.repository, investigation: args.investigationId };
      const investigation = await app.investigations.get(principal, named);
      const sources = await app.investigations.sources(principal, { ...named, limit: 100 });
      return { ...investigation, sources: sources.items };
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
