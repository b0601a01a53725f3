import type { Principal } from '../auth/rbac.js';
import { conceptDecider } from '../domain/concept/decider.js';
import { repositoryDecider } from '../domain/repository/decider.js';
import { resolveConcept } from '../read/concepts.js';
import { streamName } from '../eventstore/envelope.js';
import { jobIdFor } from '../pipeline/jobs.js';
import { loadRepositorySettings } from '../pipeline/stages/repositorySettings.js';
import { presentJob } from '../read/present.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, invalid } from './errors.js';
import { runeLength } from '../util/codePoints.js';

/** Concept commands: moving a repository's concepts from one context to another, re-making a synthesis (background tasks). */
export function conceptCommands(deps: Pick<AppContext, 'db' | 'commands' | 'store' | 'jobs' | 'config'>) {
  /**
   * A migration from a context that is neither one of the repository's nor any concept's is a
   * typo: accepted, it would run as a task that moves nothing. A context no longer allowed that
   * concepts still hold (a custom context removed since) is what a migration is for.
   */
  async function requireKnownContext(repositoryId: string, fromContext: string): Promise<void> {
    const from = fromContext.trim();
    if (from === '') return; // the decider says what is wrong with it
    const { contexts } = await loadRepositorySettings(deps.db.knex, repositoryId);
    if (contexts.some((choice) => choice.name.toLowerCase() === from.toLowerCase())) return;
    const held = await deps.db.knex('concepts')
      .where({ repository_id: repositoryId, status: 'active' })
      .whereRaw('lower(context) = ?', [from.toLowerCase()])
      .first('id');
    if (!held) throw invalid(`'${from}' is neither a context of this repository nor the context of any of its concepts`);
  }

  return {
    /**
     * Asks for the concept's synthesis to be made again now, from its current inputs (a merged
     * concept's survivor's). The answer names the synthesize_concept task that makes it.
     */
    async resynthesize(principal: Principal, input: { repository: string; concept: string; context?: string; reason?: string }, trace?: Trace) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'concepts:write');
      if (!deps.config.providers.synthesis.enabled) throw conflict('synthesis is disabled (providers.synthesis.enabled)');
      const reason = input.reason ?? '';
      // Characters as the route's maxLength counts them: an emoji is one.
      if (runeLength(reason) > 500) throw invalid('reason must be at most 500 characters');
      const { concept } = await resolveConcept(deps.db.knex, repository.id, input.concept, input.context);
      const conceptStream = streamName('concept', concept.id);
      const result = await deps.commands.execute(conceptStream, conceptDecider, { type: 'RequestResynthesis', reason }, commandMetadata(principal, repository.id, trace));
      if (result.write === null) throw conflict('the request was not recorded');
      const [requested] = await deps.store.readStream(conceptStream, { fromVersion: result.write.streamVersion, limit: 1 });
      const taskId = jobIdFor('synthesize_concept', concept.id, requested.eventId);
      const task = await deps.jobs.get(taskId);
      return { task_id: taskId, task: task ? presentJob(task) : null, concept_id: concept.id };
    },

    /** Requests the migration; the answer names the migrate_context task that carries it out. */
    async migrateContext(principal: Principal, input: { repository: string; from_context: string; to_context: string }, trace?: Trace) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'concepts:write');
      await requireKnownContext(repository.id, input.from_context);
      const repositoryStream = streamName('repository', repository.id);
      const result = await deps.commands.execute(
        repositoryStream,
        repositoryDecider,
        { type: 'RequestContextMigration', fromContext: input.from_context, toContext: input.to_context },
        commandMetadata(principal, repository.id, trace),
      );
      if (result.write === null) throw conflict('the migration was not recorded');
      const [requested] = await deps.store.readStream(repositoryStream, { fromVersion: result.write.streamVersion, limit: 1 });
      const data = requested.data as { from_context: string; to_context: string };
      // The job id is derived from (kind, subject, trigger), so it is known before intake inserts the row.
      const taskId = jobIdFor('migrate_context', repository.id, requested.eventId);
      const task = await deps.jobs.get(taskId);
      return { task_id: taskId, task: task ? presentJob(task) : null, from_context: data.from_context, to_context: data.to_context };
    },
  };
}
