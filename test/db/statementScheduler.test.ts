import t from 'tap';
import { FOREGROUND_HOLD_MS, StatementScheduler, type ScheduledStatement } from '../../src/db/statementScheduler.js';
import type { Level } from '../../src/db/priority.js';

interface Statement extends ScheduledStatement {
  name: string;
}

/** A scheduler on a clock the test moves, and a statement maker with a session each unless told. */
function given(...levels: Array<[name: string, level: Level, session?: number]>) {
  const clock = { now: 0 };
  const scheduler = new StatementScheduler<Statement>(() => clock.now);
  let session = 100;
  for (const [name, level, own] of levels) scheduler.add({ name, level, session: own ?? ++session });
  /** Takes and runs every statement that may run now; returns their names. */
  const runAll = (inTransaction: (statement: Statement) => boolean = () => false) => {
    const ran: string[] = [];
    for (let next = scheduler.next(); next !== undefined; next = scheduler.next()) {
      ran.push(next.name);
      scheduler.ran(next, inTransaction(next));
    }
    return ran;
  };
  return { clock, scheduler, runAll };
}

t.test('by level, each level in arrival order', async (t) => {
  const { runAll, scheduler } = given(['deferred 1', 'deferred'], ['background 1', 'background'], ['projections 1', 'projections'], ['deferred 2', 'deferred'], ['background 2', 'background'], ['projections 2', 'projections']);
  t.same(scheduler.waitingCounts(), { foreground: 0, projections: 2, background: 2, deferred: 2 });
  t.same(runAll(), ['projections 1', 'projections 2', 'background 1', 'background 2', 'deferred 1', 'deferred 2']);
  t.same(scheduler.waitingCounts(), { foreground: 0, projections: 0, background: 0, deferred: 0 }, 'nothing left');
});

t.test('a request that arrives goes before every lower level already waiting', async (t) => {
  const { scheduler, clock } = given(['background 1', 'background'], ['background 2', 'background']);
  const first = scheduler.next();
  t.equal(first?.name, 'background 1');
  scheduler.add({ name: 'request', level: 'foreground', session: 1 });
  scheduler.ran(first as Statement, false);
  const next = scheduler.next() as Statement;
  t.equal(next.name, 'request');
  scheduler.ran(next, false);
  t.equal(scheduler.next(), undefined, "after a request's statement lower levels wait for its next one");
  t.equal(scheduler.holdRemainingMs(), FOREGROUND_HOLD_MS);
  scheduler.add({ name: 'request again', level: 'foreground', session: 2 });
  t.equal(scheduler.next()?.name, 'request again', "the request's next statement goes first");
  clock.now += 1;
  scheduler.ran({ name: 'request again', level: 'foreground', session: 2 }, false);
  scheduler.requestYielded();
  t.equal(scheduler.next()?.name, 'background 2', 'once the request sent nothing more, lower levels go');
});

t.test('a hold ends by itself when the word that the request yielded is late', async (t) => {
  const { scheduler, clock } = given(['request', 'foreground'], ['background', 'background']);
  scheduler.ran(scheduler.next() as Statement, false);
  clock.now += FOREGROUND_HOLD_MS - 1;
  t.equal(scheduler.next(), undefined);
  t.equal(scheduler.holdRemainingMs(), 1);
  clock.now += 1;
  t.equal(scheduler.next()?.name, 'background');
});

t.test('a session inside a transaction block runs alone until the block ends', async (t) => {
  const { scheduler } = given(['BEGIN', 'background', 7]);
  const begin = scheduler.next() as Statement;
  scheduler.add({ name: 'request', level: 'foreground', session: 1 });
  scheduler.add({ name: 'projection', level: 'projections', session: 2 });
  scheduler.ran(begin, true);
  t.equal(scheduler.next(), undefined, 'the transaction has sent nothing yet: nobody else runs');
  scheduler.add({ name: 'INSERT', level: 'background', session: 7 });
  const insert = scheduler.next() as Statement;
  t.equal(insert.name, 'INSERT', "the transaction's statement goes before a waiting request");
  scheduler.ran(insert, true);
  scheduler.add({ name: 'COMMIT', level: 'background', session: 7 });
  const commit = scheduler.next() as Statement;
  t.equal(commit.name, 'COMMIT');
  scheduler.ran(commit, false);
  t.equal(scheduler.next()?.name, 'request', 'after the block, by level again');
});

t.test('a failed statement inside a block keeps the block (an aborted transaction waits for its ROLLBACK)', async (t) => {
  const { scheduler } = given(['BEGIN', 'projections', 3], ['other', 'background']);
  scheduler.ran(scheduler.next() as Statement, true);
  scheduler.add({ name: 'failing INSERT', level: 'projections', session: 3 });
  scheduler.ran(scheduler.next() as Statement, true);
  t.equal(scheduler.next(), undefined);
  scheduler.add({ name: 'ROLLBACK', level: 'projections', session: 3 });
  scheduler.ran(scheduler.next() as Statement, false);
  t.equal(scheduler.next()?.name, 'other');
});
