import t, { type Test } from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import type { Bus, BusConsumer } from '../../src/bus/port.js';
import { createKafkaBus, createKafkaRelay } from '../../src/bus/kafka.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { openStore, thing, waitUntil } from '../eventstore/contract.js';
import { deleteTestTopics, ensureBroker, perStreamOrderProblems, quickConsumer, testKafkaOptions } from './helpers.js';

/** The Bus contract, run on its adapter (Kafka; the embedded tier has no bus, docs/architecture.md). */
interface BusFixture {
  store: EventStore;
  bus: Bus;
  /** What the bus and the relay logged (kafkajs's warnings and errors, consumer crashes): shown on a timeout. */
  logged(): string[];
  /**
   * Resolves once everything appended so far is on the bus. The test's `thing` streams are no
   * category of the domain, so their topic is made by the relay's first publish of one, and a
   * consumer subscribes to the topics that exist when it starts (the tests turn the refresh that
   * would find a later one off).
   */
  published(): Promise<void>;
  close(): Promise<void>;
}

/** Waits up to 60 s for `check`; a timeout's message ends with the last 40 lines the bus logged. */
const waitForBus = (fixture: BusFixture, what: string, check: () => boolean | Promise<boolean>, intervalMs: number) =>
  waitUntil(check, 60_000, () => `${what}; the bus logged:\n${fixture.logged().slice(-40).join('\n')}`, intervalMs);

function busContract(t: Test, open: () => Promise<BusFixture>) {
  t.test('a group sees every event of its types once, in stream order; failures are redelivered; a restart resumes', async (t) => {
    const fixture = await open();
    t.teardown(() => fixture.close());
    for (let i = 0; i < 20; i++) await fixture.store.append(`thing-${i % 4}`, [thing(`n${i}`)], 'any');
    await fixture.published();

    const seen: RecordedEvent[] = [];
    let failOnce = true;
    let consumer: BusConsumer = await fixture.bus.consume({
      group: 'contract',
      types: ['ThingHappened'],
      handler: async (batch) => {
        if (failOnce && batch.length > 0) {
          failOnce = false;
          throw new Error('first delivery fails');
        }
        seen.push(...batch);
      },
    });
    await waitForBus(fixture, 'the first 20 events', () => new Set(seen.map((e) => e.eventId)).size === 20, 25);
    t.equal(seen.length, 20, 'the failed batch came again, and nothing else twice');
    t.same(perStreamOrderProblems(seen), [], 'per-stream order kept');

    await consumer.stop();
    for (let i = 20; i < 30; i++) await fixture.store.append(`thing-${i % 4}`, [thing(`n${i}`)], 'any');
    consumer = await fixture.bus.consume({ group: 'contract', types: ['ThingHappened'], handler: async (batch) => void seen.push(...batch) });
    await waitForBus(fixture, 'the 10 events after the restart', () => new Set(seen.map((e) => e.eventId)).size === 30, 25);
    await new Promise((resolve) => setTimeout(resolve, 300));
    t.equal(seen.length, 30, 'a restarted group resumes after what it acknowledged');
    await consumer.stop();
  });

  t.test('backlog: what the groups were sent and have not acknowledged', async (t) => {
    const fixture = await open();
    t.teardown(() => fixture.close());
    // The backlog asks the broker's admin API each time: every 50 ms is often enough.
    const backlogOf = (groups: string[], expected: number) =>
      waitForBus(fixture, `a backlog of ${expected} for ${groups.join(', ')}`, async () => total(await fixture.bus.backlog(groups)) === expected, 50);
    for (let i = 0; i < 6; i++) await fixture.store.append(`thing-${i % 3}`, [thing(`n${i}`)], 'any');
    await backlogOf(['never-consumed'], 6);
    t.pass('a group that never consumed owes everything published');

    let seen = 0;
    const consumer = await fixture.bus.consume({ group: 'backlog', types: ['ThingHappened'], handler: async (batch) => void (seen += batch.length) });
    await backlogOf(['backlog'], 0);
    t.equal(seen, 6, 'no backlog once the group has handled and committed all it was sent');
    t.same(await fixture.bus.backlog(['backlog', 'never-consumed']), new Map([['backlog', 0], ['never-consumed', 6]]), 'each group its own');
    t.same(await fixture.bus.backlog([]), new Map());
    t.same(await fixture.bus.consumingGroups(['backlog', 'never-consumed']), new Set(['backlog']), 'the group with a member consuming');
    await consumer.stop();
    await waitForBus(fixture, 'the stopped consumer to leave its group', async () => (await fixture.bus.consumingGroups(['backlog'])).size === 0, 50);
    t.same(await fixture.bus.consumingGroups([]), new Set());

    for (let i = 0; i < 4; i++) await fixture.store.append(`thing-${i}`, [thing(`m${i}`)], 'any');
    await backlogOf(['backlog'], 4);
    t.pass('a stopped group owes what was published after it');
  });
}

t.test('Kafka bus (distributed)', async (t) => {
  const brokers = await ensureBroker();
  busContract(t, async () => {
    const fixture = await openStore(() => openScratchPostgres(), { pollIntervalMs: 10 });
    const kafka = testKafkaOptions(brokers);
    const started = Date.now();
    const lines: string[] = [];
    // Stacks left out: kafkajs logs one per failed batch, and the handler's is known.
    const line = (level: string) => ({ stack: _stack, ...details }: Record<string, unknown>, message: string) =>
      void lines.push(`+${Date.now() - started} ms ${level} ${message} ${JSON.stringify(details)}`);
    const log = { info: line('info'), warn: line('warn'), error: line('error') };
    const relay = createKafkaRelay({ store: fixture.store, db: fixture.db, registry: fixture.schemas, kafka, log });
    await relay.start();
    const bus = createKafkaBus({ kafka, registry: fixture.schemas, consumer: quickConsumer, log });
    return {
      store: fixture.store,
      bus,
      logged: () => lines,
      published: () => relay.caughtUp(),
      close: async () => {
        await bus.close();
        await relay.stop();
        await fixture.close();
        await deleteTestTopics(brokers, kafka.topicPrefix);
      },
    };
  });
});

function total(backlog: Map<string, number>): number {
  return [...backlog.values()].reduce((sum, owed) => sum + owed, 0);
}
