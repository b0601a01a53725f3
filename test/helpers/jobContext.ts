import { randomUUID } from 'node:crypto';
import { scheduledTrigger } from '../../src/pipeline/runtime.js';
import type { JobContext, Stage } from '../../src/pipeline/types.js';

/**
 * The context the runtime gives a scheduled job of `stage` (a periodic trigger: the stage reads
 * its streams, not the trigger). `subjectId` defaults to the repository, as the scheduler sets it.
 */
export function scheduledJobContext(
  stage: Stage,
  repositoryId: string,
  options: { subjectId?: string; attempts?: number; signal?: AbortSignal; coverQueued?: JobContext['coverQueued'] } = {},
): JobContext {
  const now = new Date().toISOString();
  const triggerEventId = randomUUID();
  const job = {
    id: randomUUID(),
    kind: stage.kind,
    repositoryId,
    subjectId: options.subjectId ?? repositoryId,
    sourceId: null,
    reportId: null,
    triggerEventId,
    triggerPosition: 0,
    correlationId: triggerEventId,
    state: 'running' as const,
    attempts: options.attempts ?? 1,
    maxAttempts: 5,
    lastError: null,
    nextAttemptAt: now,
    leaseUntil: null,
    heartbeatAt: null,
    claimedBy: null,
    finishedAt: null,
    createdAt: now,
    updatedAt: now,
  };
  return {
    job,
    trigger: scheduledTrigger(job),
    scheduled: true,
    signal: options.signal ?? new AbortController().signal,
    actor: `system:${stage.kind}`,
    // No jobs table behind a run by hand unless the caller gives one: nothing queued to cover.
    coverQueued: options.coverQueued ?? (async () => 0),
  };
}
