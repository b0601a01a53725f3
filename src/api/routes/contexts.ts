import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { allowedContexts, isOntologyLevel } from '../../domain/concept/ontology.js';
import { repositoryDecider, type CustomContext } from '../../domain/repository/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import { requestMetadata, requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const contextItem = {
  type: 'object',
  required: ['name', 'description', 'kind'],
  properties: {
    name: { type: 'string' },
    description: { type: 'string' },
    kind: { type: 'string', enum: ['built_in', 'custom'], description: 'a built-in ontology level, or a custom context (preset or repository)' },
  },
} as const;

const contextsReply = {
  type: 'object',
  required: ['preset', 'contexts', 'custom_contexts'],
  properties: {
    preset: { type: 'string' },
    contexts: { type: 'array', items: contextItem, description: 'every context concept extraction may assign in this repository' },
    custom_contexts: {
      type: 'array',
      items: { type: 'object', required: ['name', 'description'], properties: { name: { type: 'string' }, description: { type: 'string' } } },
      description: "the repository's own custom contexts",
    },
  },
} as const;

const putBody = {
  type: 'object',
  required: ['custom_contexts'],
  additionalProperties: false,
  properties: {
    custom_contexts: {
      type: 'array',
      maxItems: 50,
      items: {
        type: 'object',
        required: ['name'],
        additionalProperties: false,
        properties: { name: { type: 'string', minLength: 1, maxLength: 63 }, description: { type: 'string', maxLength: 500, default: '' } },
      },
    },
  },
} as const;

function present(preset: string, customContexts: CustomContext[]) {
  return {
    preset,
    contexts: allowedContexts(preset, customContexts).map((choice) => ({ ...choice, kind: isOntologyLevel(choice.name) ? 'built_in' : 'custom' })),
    custom_contexts: customContexts,
  };
}

function parseJsonColumn<T>(value: unknown, fallback: T): T {
  if (typeof value === 'string') return JSON.parse(value) as T;
  return (value ?? fallback) as T;
}

/**
 * A repository's concept contexts: the built-in ontology levels its preset allows, the preset's
 * custom contexts, and its own custom contexts, which PUT replaces as a whole.
 */
export const contextRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['concepts'], security: bearerSecurity, params: idParam('repoID') };

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/contexts',
    { schema: { ...schema, response: { 200: contextsReply, ...errorReplies } } },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'repositories:read');
      const row: { preset: string; custom_contexts: unknown } = await context.db
        .knex('repositories')
        .where({ id: repository.id })
        .first('preset', 'custom_contexts');
      return present(row.preset, parseJsonColumn<CustomContext[]>(row.custom_contexts, []));
    },
  );

  app.put<{ Params: { repoID: string }; Body: { custom_contexts: CustomContext[] } }>(
    '/api/v1/repositories/:repoID/contexts',
    { schema: { ...schema, body: putBody, response: { 200: contextsReply, ...errorReplies } } },
    async (request) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'repositories:write');
      const result = await context.commands.execute(
        streamName('repository', repository.id),
        repositoryDecider,
        { type: 'SetCustomContexts', customContexts: request.body.custom_contexts.map((c) => ({ name: c.name, description: c.description ?? '' })) },
        requestMetadata(request, principal, repository.id),
      );
      const state = result.state;
      if (state.status === 'none') throw new Error('unreachable: the repository was found above');
      return present(state.preset, state.customContexts);
    },
  );
};
