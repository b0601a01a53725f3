import { z } from 'zod';
import type { Application } from '../../app/application.js';
import type { Principal } from '../../auth/rbac.js';
import { MAX_PAGE } from '../../read/paging.js';
import { defineTool } from './common.js';

/**
 * Every repository the caller can read, read page by page: a page of the list holds at most
 * MAX_PAGE (500), and the tool takes no paging arguments, so one page left a sysadmin with more
 * repositories without the rest (and without a word that there were more). What the caller may
 * read is the list's to decide (src/read/repositories.ts), as for REST.
 */
async function readableRepositories(repositories: Pick<Application['repositories'], 'list'>, principal: Principal) {
  const all: Awaited<ReturnType<Application['repositories']['list']>>['items'] = [];
  for (;;) {
    const { items, total } = await repositories.list(principal, { limit: MAX_PAGE, offset: all.length });
    all.push(...items);
    if (items.length < MAX_PAGE || all.length >= total) break;
  }
  return all;
}

/** Repositories and search providers: what a client asks first, to learn where it may act. */
export const repositoryTools = [
  defineTool({
    name: 'getRepositories',
    title: 'List repositories',
    description:
      'Lists the knowledge-graph repositories you can read, each with id, name, slug, tier and your roles on it (owner, editor or reader). ' +
      'Call this first: every other tool takes one of these ids or slugs as `repository`. An empty list means you hold no role on any repository.',
    input: z.object({}),
    readOnly: true,
    async run({ app, principal }) {
      return (await readableRepositories(app.repositories, principal)).map(({ id, name, slug, tier, description, roles }) => ({ id, name, slug, tier, description, roles }));
    },
  }),
  defineTool({
    name: 'listSearchProviders',
    title: 'List source search providers',
    description: 'Lists the providers searchSources can search (its `provider` argument), with the default one.',
    input: z.object({}),
    readOnly: true,
    async run({ app, principal }) {
      return app.sources.searchProviders(principal);
    },
  }),
];
