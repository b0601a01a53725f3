import { Ajv } from 'ajv';
import type { FastifyPluginAsync, FastifySchema } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { repositoryDecider } from '../../domain/repository/decider.js';
import { MAX_PROMPT_CHARS } from '../../domain/repository/prompts.js';
import { streamName } from '../../eventstore/envelope.js';
import { BUILT_IN_PROMPTSET_HASH, effectivePromptset, PROMPT_PHASES, type PromptOverrides } from '../../providers/llm/promptsets.js';
import { requestMetadata, requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const phaseTexts = {
  type: 'object',
  required: [...PROMPT_PHASES],
  properties: Object.fromEntries(PROMPT_PHASES.map((phase) => [phase, { type: 'string' }])),
} as const;

export const promptsetReplySchema = {
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

/**
 * The app's validator coerces scalars (`3` would become the prompt "3"); prompt texts must
 * really be strings or null, so this route validates without coercion.
 */
const strictAjv = new Ajv({ allErrors: false, coerceTypes: false, useDefaults: false, removeAdditional: false, strict: false });
const strictValidatorCompiler = ({ schema }: { schema: FastifySchema }) => strictAjv.compile(schema as object);

/** The stored override map: jsonb arrives parsed from pg/PGlite, as text from some drivers. */
function storedOverrides(value: unknown): PromptOverrides | null {
  const parsed: unknown = typeof value === 'string' ? JSON.parse(value) : value;
  return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as PromptOverrides) : null;
}

function present(overrides: PromptOverrides | null) {
  const promptset = effectivePromptset(overrides);
  return { phases: promptset.phases, promptset_hash: promptset.hash, overridden: promptset.overridden, built_in_hash: BUILT_IN_PROMPTSET_HASH };
}

/** A repository's promptset: the effective prompts, their hash, and its overrides. */
export const promptsetRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['repositories'], security: bearerSecurity, params: idParam('repoID') };

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/promptset',
    { schema: { ...schema, response: { 200: promptsetReplySchema, ...errorReplies } } },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'repositories:read');
      const row: { prompt_overrides?: unknown } | undefined = await context.db
        .knex('repositories')
        .where({ id: repository.id })
        .first('prompt_overrides');
      return present(storedOverrides(row?.prompt_overrides));
    },
  );

  app.put<{ Params: { repoID: string }; Body: { prompts: Record<string, string | null> } }>(
    '/api/v1/repositories/:repoID/promptset',
    { schema: { ...schema, body: putBody, response: { 200: promptsetReplySchema, ...errorReplies } }, validatorCompiler: strictValidatorCompiler },
    async (request) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'repositories:write');
      const result = await context.commands.execute(
        streamName('repository', repository.id),
        repositoryDecider,
        { type: 'SetPrompts', prompts: request.body.prompts },
        requestMetadata(request, principal, repository.id),
      );
      // The decider's state is authoritative; the read model may still be catching up.
      const state = result.state;
      return present(state.status === 'none' ? null : state.promptOverrides);
    },
  );
};
