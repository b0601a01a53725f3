import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { MAX_PROMPT_CHARS } from '../../domain/repository/prompts.js';
import { PROMPT_PHASES } from '../../providers/llm/promptsets.js';
import { requireUser, traceOf } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const phaseTexts = {
  type: 'object',
  required: [...PROMPT_PHASES],
  properties: Object.fromEntries(PROMPT_PHASES.map((phase) => [phase, { type: 'string' }])),
} as const;

const promptsetReplySchema = {
  type: 'object',
  required: ['phases', 'promptset_hash', 'overridden', 'built_in_hash'],
  properties: {
    phases: { ...phaseTexts, description: 'the effective system prompt of every phase' },
    promptset_hash: { type: 'string', description: 'SHA-256 over the four registry-shared phases (docs/providers.md)' },
    overridden: { type: 'array', items: { type: 'string', enum: [...PROMPT_PHASES] }, description: 'phases whose text is the repository override' },
    built_in_hash: { type: 'string', description: 'the built-in promptset hash, accepted by every puller' },
  },
} as const;

const putBody = {
  type: 'object',
  required: ['prompts'],
  additionalProperties: false,
  properties: {
    prompts: {
      type: 'object',
      minProperties: 1,
      additionalProperties: false,
      description: 'phase -> new override text, or null to return the phase to the built-in prompt; phases not named keep theirs',
      properties: Object.fromEntries(PROMPT_PHASES.map((phase) => [phase, { type: ['string', 'null'], maxLength: MAX_PROMPT_CHARS }])),
    },
  },
} as const;

/** A repository's promptset: the effective prompts, their hash, and its overrides. */
export const promptsetRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['repositories'], security: bearerSecurity, params: idParam('repoID') };
  const { settings } = createApplication(context);

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/promptset',
    { schema: { summary: 'Get the effective promptset and its overrides', ...schema, response: { 200: { ...promptsetReplySchema, description: 'the effective promptset of the repository' }, ...errorReplies } } },
    async (request) => settings.promptset(requireUser(request), { repository: request.params.repoID }),
  );

  app.put<{ Params: { repoID: string }; Body: { prompts: Record<string, string | null> } }>(
    '/api/v1/repositories/:repoID/promptset',
    { schema: { summary: 'Override prompts of the repository', ...schema, body: putBody, response: { 200: { ...promptsetReplySchema, description: 'the effective promptset with the overrides set' }, ...errorReplies } } },
    async (request) => settings.setPrompts(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request)),
  );
};
