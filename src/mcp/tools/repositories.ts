import { z } from 'zod';
import { principalCan, repositoryDomain } from '../../auth/rbac.js';
import { defineTool } from './common.js';

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
      const { items } = await app.repositories.list(principal, { limit: 500 });
      return items
        .filter((repository) => principalCan(principal, repositoryDomain(repository.id), 'repositories:read'))
        .map(({ id, name, slug, tier, description, roles }) => ({ id, name, slug, tier, description, roles }));
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
