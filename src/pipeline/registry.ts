import { QUEUED_JOB_KINDS, type Config, type QueuedJobKind } from '../config/types.js';
import type { PeriodicJob } from './scheduler.js';
import type { Stage, StageDefinition, StageDeps } from './types.js';
import { retrieveSourceStage } from './stages/retrieveSource.js';
import { sourceDecompositionStage } from './stages/sourceDecomposition.js';
import { embedFactsStage } from './stages/embedFacts.js';
import { deduplicateFactsStage } from './stages/deduplicateFacts.js';
import { cleanupFactsStage } from './stages/cleanupFacts.js';
import { extractConceptsStage } from './stages/extractConcepts.js';
import { embedConceptsStage } from './stages/embedConcepts.js';
import { refineConceptsStage } from './stages/refineConcepts.js';
import { migrateContextStage } from './stages/migrateContext.js';
import { refreshConceptRelationsStage } from './stages/refreshConceptRelations.js';
import { annotateReportStage } from './stages/annotateReport.js';
import { summarizeConceptsStage } from './stages/summarizeConcepts.js';
import { synthesizeConceptStage } from './stages/synthesizeConcept.js';

/**
 * Every stage of the pipeline, in the order the runtime starts their dispatchers. Adding a
 * stage is a file under `stages/` exporting its `StageDefinition`, and one line here
 * (docs/architecture.md, "Adding a stage").
 */
export const stageRegistry: readonly StageDefinition[] = [
  retrieveSourceStage,
  sourceDecompositionStage,
  embedFactsStage,
  deduplicateFactsStage,
  cleanupFactsStage,
  extractConceptsStage,
  embedConceptsStage,
  refineConceptsStage,
  migrateContextStage,
  refreshConceptRelationsStage,
  annotateReportStage,
  summarizeConceptsStage,
  synthesizeConceptStage,
];

export interface PipelineStages {
  /** The enabled stages, created once each, in registry order. */
  stages: Stage[];
  /** The periodic runs the enabled stages declare, for the scheduler. */
  periodic: PeriodicJob[];
  /** Job kinds of the spec (`task.queues`) that no registered stage runs (yet): jobs of these kinds would never run. */
  kindsWithoutStage: QueuedJobKind[];
}

/**
 * Creates the stages `config` enables. Refuses a registry that names a kind twice or a kind
 * that is not a job kind of the spec, and a definition whose stage comes out with another kind.
 */
export function createPipelineStages(config: Config, deps: StageDeps, registry: readonly StageDefinition[] = stageRegistry): PipelineStages {
  const specKinds: ReadonlySet<string> = new Set(QUEUED_JOB_KINDS);
  const registered = new Set<string>();
  for (const definition of registry) {
    if (!specKinds.has(definition.kind)) {
      throw new Error(`stage kind ${String(definition.kind)} is not a job kind of the spec (config/types.ts QUEUED_JOB_KINDS, task.queues)`);
    }
    if (registered.has(definition.kind)) throw new Error(`stage kind ${definition.kind} is registered twice`);
    registered.add(definition.kind);
  }

  const stages: Stage[] = [];
  const periodic: PeriodicJob[] = [];
  for (const definition of registry) {
    if (!definition.enabled(config)) continue;
    const stage = definition.create(deps);
    if (stage.kind !== definition.kind) {
      throw new Error(`the definition of ${definition.kind} created a stage of kind ${stage.kind}`);
    }
    stages.push(stage);
    const intervalMs = definition.periodicIntervalMs?.(config) ?? null;
    if (intervalMs !== null) periodic.push({ kind: definition.kind, intervalMs });
  }
  return { stages, periodic, kindsWithoutStage: QUEUED_JOB_KINDS.filter((kind) => !registered.has(kind)) };
}
