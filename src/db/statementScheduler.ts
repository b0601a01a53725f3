import { LEVELS, type Level } from './priority.js';

/** What the scheduler needs of a statement: whose it is and at which level it was sent. */
export interface ScheduledStatement {
  /** One knex connection hand-out (a transaction's statements share theirs); a lone statement has its own. */
  session: number;
  level: Level;
}

/**
 * The order in which PGlite's thread runs the statements sent to it (src/db/pgliteWorker.ts),
 * with the rules of src/db/priority.ts:
 *
 * - a session that left PGlite inside a transaction block owns it: only its statements run until
 *   one of them ends the block (COMMIT or ROLLBACK), so a transaction is never interleaved;
 * - otherwise the next statement is the earliest of the highest level waiting;
 * - after a request's statement, lower levels wait until the API thread says the request sent
 *   nothing more in that turn of its event loop (`requestYielded`) or `FOREGROUND_HOLD_MS` pass:
 *   a request runs its statements one after another, and its next one must not queue behind
 *   a pipeline statement that was already waiting.
 *
 * The API thread sends every statement as soon as its caller does, so when one statement ends
 * the next is already here: PGlite's thread no longer idles for a round trip to the API thread
 * between two callers' statements, as it did while the API thread handed the connection out.
 */
export class StatementScheduler<S extends ScheduledStatement> {
  private readonly waiting: Record<Level, S[]> = { foreground: [], projections: [], background: [], deferred: [] };
  private owner: number | null = null;
  /** Set when a request's statement ended and lower levels should wait for its next (performance.now()). */
  private holdUntil: number | null = null;

  constructor(private readonly now: () => number = () => performance.now()) {}

  add(statement: S): void {
    this.waiting[statement.level].push(statement);
  }

  /** The API thread's request code sent nothing more: lower levels may go. */
  requestYielded(): void {
    this.holdUntil = null;
  }

  /**
   * The statement to run now, taken out of the queue; undefined when none may run yet. A
   * caller that gets undefined while `holdRemainingMs()` is positive tries again after that long.
   */
  next(): S | undefined {
    if (this.owner !== null) {
      for (const level of LEVELS) {
        const queue = this.waiting[level];
        const index = queue.findIndex((statement) => statement.session === this.owner);
        if (index >= 0) return queue.splice(index, 1)[0];
      }
      return undefined;
    }
    if (this.waiting.foreground.length > 0) return this.waiting.foreground.shift();
    if (this.holdRemainingMs() > 0) return undefined;
    this.holdUntil = null;
    for (const level of LEVELS) {
      const statement = this.waiting[level].shift();
      if (statement !== undefined) return statement;
    }
    return undefined;
  }

  /** Records that `statement` ran, and whether PGlite is inside a transaction block after it. */
  ran(statement: S, inTransaction: boolean): void {
    this.owner = inTransaction ? statement.session : null;
    if (!inTransaction && statement.level === 'foreground') this.holdUntil = this.now() + FOREGROUND_HOLD_MS;
  }

  /** How long lower levels still wait for a request's next statement (0: they need not). */
  holdRemainingMs(): number {
    return this.holdUntil === null ? 0 : Math.max(0, this.holdUntil - this.now());
  }

  /** Statements waiting, by level. */
  waitingCounts(): Record<Level, number> {
    const { foreground, projections, background, deferred } = this.waiting;
    return { foreground: foreground.length, projections: projections.length, background: background.length, deferred: deferred.length };
  }
}

/**
 * The longest lower levels wait after a request's statement for the API thread's word that the
 * request sent nothing more: a net for a word that is late, not the usual wait (that is one turn
 * of the API thread's event loop and a message).
 */
export const FOREGROUND_HOLD_MS = 5;
