import type { Test } from 'tap';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { CommandBus } from '../../src/app/commands.js';

/** A write sent beside the end of its credential: its answer, and how to find what it appended. */
export interface RacedWrite<Answer> {
  name: string;
  answer: Promise<Answer>;
  wrote: (event: RecordedEvent) => boolean;
}

/**
 * The credential fence's promise (src/app/repositoryFence.ts) for writes sent beside the end of
 * their credential (a logout, a revocation): once `end` has answered, the log it reads holds every
 * write answered as a success, and every other write was refused as `refusedAsExpected` says and
 * appended nothing, then or after.
 */
export async function checkWritesBesideTheirEnd<Answer>(
  t: Test,
  options: {
    end: () => Promise<unknown>;
    readLog: () => Promise<readonly RecordedEvent[]>;
    writes: ReadonlyArray<RacedWrite<Answer>>;
    succeeded: (answer: Answer) => boolean;
    refusedAsExpected: (answer: Answer) => boolean;
    describe: (answer: Answer) => string;
  },
): Promise<void> {
  const logAtTheEnd = options.end().then(() => options.readLog());
  const [log, answers] = await Promise.all([logAtTheEnd, Promise.all(options.writes.map((write) => write.answer))]);
  const after = await options.readLog();
  answers.forEach((answer, n) => {
    const { name, wrote } = options.writes[n];
    if (options.succeeded(answer)) t.ok(log.some(wrote), `a write answered with success (${name}: ${options.describe(answer)}) had landed when the end was answered`);
    else t.same([options.refusedAsExpected(answer), after.some(wrote)], [true, false], `a write refused (${name}: ${options.describe(answer)}) as expected, with nothing written`);
  });
}

/** How a REST write sent beside its credential's end reads: a success (200, 201) or the fence's refusal (401, 403). */
export const restWriteAnswers = {
  succeeded: (answer: { status: number }) => answer.status === 200 || answer.status === 201,
  refusedAsExpected: (answer: { status: number }) => answer.status === 401 || answer.status === 403,
  describe: (answer: { status: number; body: { message?: string } }) => `${answer.status} ${answer.body.message ?? ''}`,
};

/**
 * The command bus `commands`, except that once a command has stored (and settled) an event of
 * `eventType`, `race()` (a deletion) is sent beside it, once, and given up to 500 ms to land
 * before that command reads its answer back. `raced()` is what `race` answered or threw, or null
 * while it has not been sent.
 */
export function racingCommandBus(commands: CommandBus, eventType: string, race: () => Promise<unknown>): { bus: CommandBus; raced: () => Promise<unknown> | null } {
  let raced: Promise<unknown> | null = null;
  const bus: CommandBus = {
    settle: (write) => commands.settle(write),
    step: (metadata, access, work) => commands.step(metadata, access, work),
    async execute(streamId, decider, command, metadata, options) {
      const result = await commands.execute(streamId, decider, command, metadata, options);
      if (raced === null && result.events.some((event) => event.type === eventType)) {
        raced = race().catch((error: unknown) => error);
        // Time for a race that nothing holds back to land before the command reads its answer.
        await Promise.race([raced, new Promise((resolve) => setTimeout(resolve, 500))]);
      }
      return result;
    },
  };
  return { bus, raced: () => raced };
}
