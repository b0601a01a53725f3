import { z } from 'zod';
import { conceptArgument, contextArgument, defineTool, limitArgument, offsetArgument, repositoryArgument, searchModeArgument, textOfAtMost } from './common.js';

/** Concepts: the entities and ideas facts are linked to, their summaries and how they relate. */
export const conceptTools = [
  defineTool({
    name: 'searchConcepts',
    title: 'Search concepts',
    description:
      'Searches the concepts (entities and ideas the facts are about) of a repository by name and aliases, best match first. ' +
      'Small concepts (few facts) are hidden unless `show_small` is true. Each item has the concept id, canonical name, context and fact count.',
    input: z.object({
      repository: repositoryArgument,
      query: textOfAtMost(1000).optional().describe('Web-search syntax over names and aliases; empty lists concepts by canonical name.'),
      show_small: z.boolean().optional().describe('Also concepts with fewer facts than the repository minimum (default false).'),
      context: contextArgument,
      mode: searchModeArgument,
      limit: limitArgument(50, 500),
      offset: offsetArgument,
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.concepts.search(principal, { ...args, limit: args.limit ?? 50 });
    },
  }),
  defineTool({
    name: 'getConcept',
    title: 'Get a concept',
    description: 'One concept by id, canonical name or alias: its names, aliases, context and fact count. A merged concept answers with the concept it was merged into.',
    input: z.object({ repository: repositoryArgument, concept: conceptArgument, context: contextArgument }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.concepts.get(principal, args);
    },
  }),
  defineTool({
    name: 'getConceptSummaries',
    title: "Get a concept's summaries",
    description:
      "A concept's summary slices (in order) and its synthesis (a definition written from its facts) with the facts the synthesis cites (`cited_facts`), " +
      'the images it shows (`images`: fact_id, image_id, caption) and the concepts it names as related (`related_concepts`). ' +
      'A cited fact merged since is shown as the fact it merged into, once, with `merged_from` (the cited ids that led there); a retracted one is left out. ' +
      'A related concept merged since is shown as its survivor, with `redirected_from`. ' +
      '`synthesis` is null until one has been made.',
    input: z.object({ repository: repositoryArgument, concept: conceptArgument, context: contextArgument, limit: limitArgument(50, 500), offset: offsetArgument }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.summaries.summariesWithDefinition(principal, args);
    },
  }),
  defineTool({
    name: 'getRelatedConcepts',
    title: 'Get related concepts',
    description:
      'The concepts that share facts with this one, most shared facts first, each with `shared_fact_count` and a band (stable, weak). ' +
      'Relations below the significance threshold are left out unless `show_insignificant` is true.',
    input: z.object({
      repository: repositoryArgument,
      concept: conceptArgument,
      context: contextArgument,
      show_insignificant: z.boolean().optional().describe('Also relations with fewer shared facts than the threshold (default false).'),
      limit: limitArgument(50, 500),
      offset: offsetArgument,
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.concepts.relations(principal, args);
    },
  }),
  defineTool({
    name: 'getConceptRelation',
    title: 'Get the relation of two concepts',
    description:
      'Why two concepts are related: the band of the pair (insignificant, weak, stable) with `shared_fact_count`, and a page of the facts both are linked to now ' +
      '(`facts`, newest first; `total` counts them). A merged concept answers as the concept it was merged into, with `redirected_from` (`other_redirected_from` for the other). ' +
      '`shared_fact_count` and the band are as of the last relations refresh (a pair never related: 0, insignificant); `facts` are read now.',
    input: z.object({
      repository: repositoryArgument,
      concept: conceptArgument,
      context: contextArgument,
      other: conceptArgument.describe('The other concept: its id (UUID), canonical name or alias (case-insensitive). Not the concept itself.'),
      // Its own context: the two names may be of different contexts, so `context` cannot pick both (as REST's other_context).
      other_context: contextArgument.describe(
        'The context of `other` (e.g. "chemical"), to pick among concepts that share its name; not only whitespace. With an id, leave it out.',
      ),
      limit: limitArgument(50, 500),
      offset: offsetArgument,
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.concepts.relation(principal, args);
    },
  }),
  defineTool({
    name: 'getConceptSources',
    title: "Get a concept's sources",
    description: 'The sources whose facts are linked to this concept, with how many of its facts each contributed.',
    input: z.object({ repository: repositoryArgument, concept: conceptArgument, context: contextArgument, limit: limitArgument(50, 500), offset: offsetArgument }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.concepts.sources(principal, args);
    },
  }),
];
