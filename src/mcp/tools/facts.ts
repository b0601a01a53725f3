import { z } from 'zod';
import { invalid } from '../../app/errors.js';
import { MAX_CONCEPT_FILTER } from '../../read/facts.js';
import { conceptArgument, contextArgument, defineTool, idArgument, limitArgument, offsetArgument, repositoryArgument, searchModeArgument, textOfAtMost } from './common.js';

/** Facts: the atomic statements extracted from sources, each citable by its id. */
export const factTools = [
  defineTool({
    name: 'searchFacts',
    title: 'Search facts',
    description:
      'Searches the facts (atomic statements extracted from sources) of a repository, best match first. `query` uses web-search syntax: ' +
      'words are ANDed, "quoted phrases", OR, and -excluded words. Narrow by one `concept`, by a `context`, or to facts shared by all of ' +
      '2 to 20 `concepts`. Each item has the fact `id` (cite it), its content and score; `mode` says whether hybrid or lexical search answered.',
    input: z.object({
      repository: repositoryArgument,
      query: textOfAtMost(1000).optional().describe('Web-search syntax; empty lists the facts the filters allow.'),
      concept: conceptArgument.optional().describe('Only facts linked to this concept (UUID, canonical name or alias). Not with `concepts`.'),
      context: contextArgument.describe('Only facts linked to a concept of this context; concept names are looked up in it. Not only whitespace.'),
      concepts: z
        .array(textOfAtMost(500).min(1))
        .min(2)
        .max(MAX_CONCEPT_FILTER)
        .optional()
        .describe(`Only facts linked to every one of these 2 to ${MAX_CONCEPT_FILTER} concepts (UUIDs or names). Not with \`concept\`.`),
      mode: searchModeArgument,
      limit: limitArgument(10, 200),
      offset: offsetArgument,
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      if (args.concept !== undefined && args.concepts !== undefined) throw invalid('give concept or concepts, not both');
      if (args.concepts?.some((name) => name.includes(','))) throw invalid('a name in concepts cannot contain a comma: use the concept id');
      return app.facts.search(principal, {
        repository: args.repository,
        query: args.query,
        concept: args.concept,
        concepts: args.concepts?.join(','),
        context: args.context,
        mode: args.mode,
        limit: args.limit ?? 10,
        offset: args.offset,
      });
    },
  }),
  defineTool({
    name: 'getFact',
    title: 'Get a fact',
    description: 'One fact by id, with the sources it was extracted from (url, title, and the source text it came from).',
    input: z.object({ repository: repositoryArgument, factId: idArgument('fact') }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.facts.get(principal, { repository: args.repository, fact: args.factId });
    },
  }),
  defineTool({
    name: 'getFactConcepts',
    title: "Get a fact's concepts",
    description:
      'What a fact is about: the concepts it is linked to (id, canonical name, context, fact count), by canonical name. ' +
      'A merged fact answers with the fact it was merged into (`fact_id`, and `merged_from` the id asked for).',
    input: z.object({ repository: repositoryArgument, factId: idArgument('fact') }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.facts.concepts(principal, { repository: args.repository, fact: args.factId });
    },
  }),
];
