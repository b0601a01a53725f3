import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { SummarySearchInput } from '../../read/summaries.js';
import { requireUser, traceOf } from '../guard.js';
import {
  bearerSecurity,
  conceptErrorReplies,
  conceptParams,
  conceptSummarySchema,
  contextParameter,
  factSchema,
  idParam,
  jobSchema,
  namedConcept,
  pagingQuery,
  searchQuerystring,
  searchReply,
  type ConceptParams,
} from '../schemas.js';

const contextQuery = { context: contextParameter('the context a concept name is looked up in, when several contexts share it') } as const;

const redirectSchema = {
  type: ['object', 'null'],
  description: 'the merged concept that was asked for, when the answer is its survivor',
  properties: { id: { type: 'string' }, canonical_name: { type: 'string' }, context: { type: 'string' } },
} as const;

const summarySchema = {
  type: 'object',
  required: ['id', 'concept_id', 'slice_number', 'is_open', 'content', 'fact_ids', 'fact_count'],
  properties: {
    id: { type: 'string' },
    concept_id: { type: 'string' },
    slice_number: { type: 'integer', description: '1-based position in the concept\'s sequence of slices' },
    is_open: { type: 'boolean', description: 'true: still accumulating facts; false: frozen (exactly providers.summarization.batch_size facts)' },
    content: { type: 'string', description: 'Markdown citing only this slice\'s facts as [text](<fact:FACT_ID>)' },
    fact_ids: { type: 'array', items: { type: 'string' }, description: 'the facts the slice covers, in order' },
    fact_count: { type: 'integer' },
    model_id: { type: 'string' },
    reason: { type: 'string', enum: ['facts_added', 'facts_removed'], description: 'why the slice was last written' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

const briefConcept = { type: 'object', properties: { id: { type: 'string' }, canonical_name: { type: 'string' }, context: { type: 'string' } } } as const;

/** The cited ids that led to a fact of a definition by merges (the ids its content's links name). */
const citedAs = { type: 'array', items: { type: 'string' }, description: 'the cited fact ids that merged into this fact; empty when it is cited by its own id only' } as const;


/**
 * Summaries and syntheses (src/read/summaries.ts, src/app/concepts.ts): a concept's summary
 * slices, its definition (the synthesis with the facts and images it covers), re-making the
 * synthesis on demand, and search over a repository's summary slices.
 */
export const summaryRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['concepts'], security: bearerSecurity };
  const { concepts, summaries } = createApplication(context);

  app.get<{ Params: ConceptParams; Querystring: { context?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/summaries',
    {
      schema: {
        ...schema,
        summary: "A concept's summary slices, in slice order",
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: { ...contextQuery, ...pagingQuery } },
        response: {
          200: {
            description: 'the summary slices of the concept, in slice order',
            type: 'object',
            required: ['concept', 'items', 'total'],
            properties: { concept: conceptSummarySchema, redirected_from: redirectSchema, items: { type: 'array', items: summarySchema }, total: { type: 'integer' } },
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => summaries.summaries(requireUser(request), { ...request.query, ...namedConcept(request.params, request.query) }),
  );

  app.get<{ Params: ConceptParams; Querystring: { context?: string } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/definition',
    {
      schema: {
        ...schema,
        summary: "A concept's definition: its synthesis, with the facts it cites and the images it shows",
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: contextQuery },
        response: {
          200: {
            description: 'the definition of the concept',
            type: 'object',
            required: ['concept', 'synthesis', 'facts', 'images', 'related_concepts'],
            properties: {
              concept: conceptSummarySchema,
              redirected_from: redirectSchema,
              synthesis: {
                type: ['object', 'null'],
                description: 'null until the concept has a synthesis',
                properties: {
                  id: { type: 'string' },
                  content: { type: 'string', description: 'Markdown citing the concept\'s facts as [text](<fact:FACT_ID>)' },
                  fact_ids: { type: 'array', items: { type: 'string' } },
                  slice_ids: { type: 'array', items: { type: 'string' } },
                  model_id: { type: 'string' },
                  reason: { type: 'string', enum: ['inputs_changed', 'requested'] },
                  created_at: { type: 'string' },
                  updated_at: { type: 'string' },
                },
              },
              facts: {
                type: 'array',
                items: { ...factSchema, properties: { ...factSchema.properties, merged_from: citedAs } },
                description: 'the live facts the synthesis cites, in order of first citation: a cited fact merged since is its survivor, listed once',
              },
              images: {
                type: 'array',
                items: { type: 'object', properties: { fact_id: { type: 'string' }, image_id: { type: ['string', 'null'] }, caption: { type: 'string' }, merged_from: citedAs } },
              },
              related_concepts: {
                type: 'array',
                items: {
                  ...briefConcept,
                  properties: {
                    ...briefConcept.properties,
                    redirected_from: { type: 'array', items: briefConcept, description: 'the related concepts the synthesis names that merged into this one' },
                  },
                },
                description: 'a related concept merged since is its survivor, listed once, never the concept itself',
              },
            },
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => summaries.definition(requireUser(request), namedConcept(request.params, request.query)),
  );

  app.post<{ Params: ConceptParams; Querystring: { context?: string }; Body: { reason?: string } | undefined }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/resynthesize',
    {
      schema: {
        ...schema,
        summary: "Make the concept's synthesis again now (a synthesize_concept task)",
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: contextQuery },
        body: { type: ['object', 'null'], additionalProperties: false, properties: { reason: { type: 'string', maxLength: 500 } } },
        response: {
          202: {
            description: 'the synthesis task, queued',
            type: 'object',
            required: ['task_id', 'concept_id'],
            properties: {
              task_id: { type: 'string', description: 'the synthesize_concept task: GET .../tasks/{task_id}' },
              task: { anyOf: [{ type: 'null' }, jobSchema] },
              concept_id: { type: 'string', description: 'the concept re-synthesised (a merged one\'s survivor)' },
            },
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request, reply) =>
      reply
        .status(202)
        .send(await concepts.resynthesize(requireUser(request), { ...namedConcept(request.params, request.query), reason: request.body?.reason ?? '' }, traceOf(request))),
  );

  app.get<{ Params: { repoID: string }; Querystring: Omit<SummarySearchInput, 'repository'> }>(
    '/api/v1/repositories/:repoID/summaries',
    {
      schema: {
        ...schema,
        summary: "Search the repository's summary slices",
        params: idParam('repoID'),
        querystring: searchQuerystring({
          concept_id: { type: 'string', minLength: 1, maxLength: 500, description: 'only slices of this concept: its id or name (a merged one means its survivor); 404 when unknown' },
          context: contextParameter('the context of concept_id, when it is a name several contexts share (only with concept_id)'),
        }),
        response: { 200: { description: 'a page of the summary slices, best match first', ...searchReply({ ...summarySchema, properties: { ...summarySchema.properties, concept: { ...briefConcept, type: ['object', 'null'] }, score: { type: 'number' } } }) }, ...conceptErrorReplies },
      },
    },
    async (request) => summaries.search(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );
};
