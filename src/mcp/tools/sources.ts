import { z } from 'zod';
import { invalid } from '../../app/errors.js';
import { MAX_SOURCE_DOI_CHARS, MAX_SOURCE_URL_CHARS } from '../../domain/source/reference.js';
import { MAX_SOURCE_QUERY_CHARS } from '../../read/sources.js';
import { defineTool, idArgument, repositoryArgument, textOfAtMost } from './common.js';

/** Sources: find the documents a repository has, and add new ones (fetched and decomposed into facts in the background). */
export const sourceTools = [
  defineTool({
    name: 'searchSources',
    title: 'Search sources',
    description:
      'Finds sources (documents) whose title, URL, DOI or file name contains every word of `query`, newest first. ' +
      'Returns items with id, url, doi, title and status, the total, and `next_cursor` (pass it as `cursor` for the next page; null on the last).',
    input: z.object({
      repository: repositoryArgument,
      query: textOfAtMost(MAX_SOURCE_QUERY_CHARS).min(1).describe('Words to look for in the source title, URL, DOI or file name.'),
      provider: z.string().min(1).max(100).optional().describe('Where to search: an id from listSearchProviders (default "local", the repository itself).'),
      per_page: z.number().int().min(1).max(100).optional().describe('Sources per page (1 to 100; default 20).'),
      cursor: z.string().max(200).optional().describe('The `next_cursor` of the previous page.'),
    }),
    readOnly: true,
    async run({ app, principal }, args) {
      return app.sources.search(principal, { repository: args.repository, query: args.query, provider: args.provider, limit: args.per_page, cursor: args.cursor });
    },
  }),
  defineTool({
    name: 'fetchAndProcessSource',
    title: 'Add a source by URL or DOI',
    description:
      'Adds a document by `url` or `doi` (exactly one) to the repository; the service fetches it and extracts facts and concepts in the background. ' +
      'With `investigationId` the source is also added to that investigation. A URL or DOI the repository already has answers its existing source (`created: false`). ' +
      'Poll getSourceTasks with the returned source id until `complete` is true, then search its facts. Needs editor or owner.',
    input: z.object({
      repository: repositoryArgument,
      url: textOfAtMost(MAX_SOURCE_URL_CHARS).min(1).optional().describe('An absolute http(s) URL of the document.'),
      doi: textOfAtMost(MAX_SOURCE_DOI_CHARS).min(1).optional().describe('A DOI such as 10.1000/xyz123 (instead of url).'),
      investigationId: idArgument('investigation').optional().describe('Also add the source to this investigation (UUID).'),
    }),
    readOnly: false,
    async run({ app, principal, trace }, args) {
      if ((args.url === undefined) === (args.doi === undefined)) throw invalid('give exactly one of url or doi');
      const reference = args.url !== undefined ? { url: args.url } : { doi: args.doi ?? '' };
      if (args.investigationId === undefined) return app.sources.add(principal, { repository: args.repository, ...reference }, trace);
      const added = await app.investigations.addSource(principal, { repository: args.repository, investigation: args.investigationId, ...reference }, trace);
      return { created: added.registered, added_to_investigation: added.added, source: added.source };
    },
  }),
];
