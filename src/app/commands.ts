import type { Decider } from '../domain/decider.js';
import { handleCommand, type CommandResult, type HandleCommandOptions } from '../eventstore/commandHandler.js';
import type { DomainEvent } from '../domain/event.js';
import type { EventMetadata } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import { ProjectionWaitTimeoutError } from '../projection/runner.js';
import type { AppendedWrite } from '../projection/types.js';
import type { LockMarks } from './lockMarks.js';
import type { RepositoryFence } from './repositoryFence.js';
import { parseDuration } from '../config/duration.js';

/** The longest a command waits for its read models before it answers anyway (the write is stored). */
export const MAX_SETTLE_WAIT_MS = 30_000;

/**
 * How long a command waits for its read models: MAX_SETTLE_WAIT_MS, but two thirds at most of the
 * HTTP server's idle deadline (`read_timeout + write_timeout`, src/api/app.ts): a request sends
 * nothing while it waits, and at the deadline its connection is closed, so with the defaults
 * (30 s) a write whose read models lagged got no answer at all, only a closed socket. Both 0s
 * (no deadline): MAX_SETTLE_WAIT_MS.
 */
export function settleWaitMs(server: { read_timeout: string; write_timeout: string }): number {
  const deadlineMs = parseDuration(server.read_timeout) + parseDuration(server.write_timeout);
  return deadlineMs === 0 ? MAX_SETTLE_WAIT_MS : Math.min(MAX_SETTLE_WAIT_MS, Math.floor((deadlineMs * 2) / 3));
}

/**
 * Command execution for request handlers: run the command, then wait until the read models
 * have applied its events, so the caller's next read sees its own write.
 */
export interface CommandBus {
  execute<State, Command, Event extends DomainEvent>(
    streamId: string,
    decider: Decider<State, Command, Event>,
    command: Command,
    metadata: EventMetadata,
    /**
     * `newStream` for a stream id made just now (HandleCommandOptions); `changesAccess` for a
     * command that changes who may act in its repository; `endsCredential` for one that ends a
     * credential, which the credential of its call does not fence (src/app/repositoryFence.ts).
     */
    options?: Pick<HandleCommandOptions, 'newStream'> & { changesAccess?: boolean; endsCredential?: boolean },
  ): Promise<CommandResult<State>>;
  /** Waits for the read models to apply a write (e.g. after a raw append). */
  settle(write: AppendedWrite | null): Promise<void>;
  /**
   * Runs `work`, which executes several commands of one caller in one repository (or in none),
   * as one step of the fence (src/app/repositoryFence.ts): its locks are taken and its checks made
   * once, before `work`, and held until `work` ends, so nothing the fence waits for (an end of the
   * credential, a role change, a deletion) lands between two of the commands.
   */
  step<T>(metadata: EventMetadata, access: 'acts' | 'changes', work: () => Promise<T>): Promise<T>;
}

export function createCommandBus(
  store: EventStore,
  /** Waits for the read models to apply the write; answers those it did not wait for that may not have (ReadModelRunner.settle). */
  waitForProjections: (write: AppendedWrite) => Promise<readonly string[]>,
  log: { warn(object: object, message: string): void } = console,
  fence?: RepositoryFence,
  lockMarks?: Pick<LockMarks, 'leave'>,
): CommandBus {
  const settle = async (write: AppendedWrite | null) => {
    if (write === null) return;
    let unapplied: readonly string[];
    try {
      unapplied = await waitForProjections(write);
    } catch (error) {
      // The write is stored; a lagging read model must not turn it into an error for the caller.
      if (!(error instanceof ProjectionWaitTimeoutError)) throw error;
      log.warn({ position: write.position, stream: write.streamId }, 'read models lag behind a write; answering before they caught up');
      unapplied = error.unapplied;
    }
    // Answered before those read models have it: the next holder of a lock held here must not decide on them before they do.
    if (unapplied.length > 0) await lockMarks?.leave(write, unapplied);
  };
  return {
    async execute(streamId, decider, command, metadata, options = {}) {
      const { changesAccess = false, endsCredential = false, ...handleOptions } = options;
      const run = async () => {
        const result = await handleCommand(store, streamId, decider, command, metadata, handleOptions);
        // Inside the fence: a change of access is seen by the commands after it only once its read models have it.
        await settle(result.write);
        return result;
      };
      return fence ? fence.run(metadata, changesAccess ? 'changes' : endsCredential ? 'ends' : 'acts', run) : run();
    },
    settle,
    step: (metadata, access, work) => (fence ? fence.run(metadata, access, work) : work()),
  };
}
