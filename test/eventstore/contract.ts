import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import type { Database } from '../../src/db/database.js';
import { releaseMemoryPglite, takeMemoryPglite } from '../helpers/pglite.js';
import type { NewEvent, RecordedEvent } from '../../src/eventstore/envelope.js';
import { ConcurrencyError, InvalidEventError, type EventStore } from '../../src/eventstore/port.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { appendInTransaction, createPostgresEventStore, migrateEventStore, unfilteredEventColumns } from '../../src/eventstore/postgres.js';

/** Event schemas of the suite only: the real ones live in schemas/events. */
export function testSchemas(): EventSchemaRegistry {
  const schemas = new EventSchemaRegistry();
  schemas.register('ThingHappened', {
    type: 'record',
    name: 'ThingHappened',
    namespace: 'factlog.events',
    fields: [
      { name: 'name', type: 'string' },
      { name: 'count', type: 'int' },
      { name: 'tags', type: { type: 'array', items: 'string' }, default: [] },
      { name: 'note', type: ['null', 'string'], default: null },
      {
        name: 'detail',
        type: ['null', { type: 'record', name: 'Detail', fields: [{ name: 'level', type: 'int' }] }],
        default: null,
      },
    ],
  });
  schemas.register('OtherHappened', {
    type: 'record',
    name: 'OtherHappened',
    namespace: 'factlog.events',
    fields: [{ name: 'value', type: 'long' }],
  });
  return schemas;
}

/**
 * A fresh in-memory PGlite Database. Creating PGlite runs initdb (about 2 s), so it loads a dump
 * of an empty instance (about 0.5 s; test/helpers/pglite.ts). Without pgvector: the event store
 * does not need it.
 */
export async function openMemoryPglite(): Promise<Database> {
  const pglite = await takeMemoryPglite();
  // knex-pglite closes its PGlite when knex is destroyed; this one goes back to be emptied and kept.
  const connection = { waitReady: pglite.waitReady, query: pglite.query.bind(pglite), close: async () => undefined };
  const knex = knexFactory({ client: ClientPgLite, dialect: 'postgres', connection: () => ({ pglite: connection }) } as Knex.Config);
  let closing: Promise<void> | null = null;
  return {
    knex,
    kind: 'pglite',
    hasVector: false,
    close: () => {
      closing ??= (async () => {
        await knex.destroy();
        await releaseMemoryPglite(pglite);
      })();
      return closing;
    },
  };
}

export interface StoreFixture {
  db: Database;
  store: EventStore;
  schemas: EventSchemaRegistry;
  close(): Promise<void>;
}

/**
 * The store, with global reads that first wait (up to `timeoutMs`) until this store's own
 * appends are visible. On a shared PostgreSQL server the visibility cutoff is server-wide: a
 * write transaction of another test, in another database, holds back readers of this log until
 * it ends (docs/architecture.md, "Gap-free reading"). The port promises that appends become
 * visible in order, not at once, so the contract waits for that instead of racing other suites.
 */
export function awaitingOwnAppends(store: EventStore, timeoutMs = 60_000): EventStore {
  let ownHead = 0;
  let appending = 0;
  // A read made while this store is still appending (the concurrent-writers test's tail reader)
  // goes straight through: it is meant to observe the log mid-flight.
  const untilVisible = async () => {
    if (appending > 0) return;
    await waitUntil(async () => (await store.headPosition()) >= ownHead, timeoutMs, `this store's appends up to position ${ownHead}`);
  };
  const wrapped: Pick<EventStore, 'append' | 'readAll' | 'headPosition' | 'subscribe'> = {
    async append(streamId, events, expected) {
      appending++;
      try {
        const result = await store.append(streamId, events, expected);
        ownHead = Math.max(ownHead, result.lastPosition);
        return result;
      } finally {
        appending--;
      }
    },
    async readAll(options) {
      await untilVisible();
      return store.readAll(options);
    },
    async headPosition() {
      await untilVisible();
      return store.headPosition();
    },
    // caughtUp() aims at the head visible when it is called: first let this store's appends show.
    subscribe(options) {
      const subscription = store.subscribe(options);
      return {
        stop: () => subscription.stop(),
        async caughtUp() {
          await untilVisible();
          return subscription.caughtUp();
        },
      };
    },
  };
  return withOverrides(store, wrapped);
}

/**
 * The store with some of its members replaced (test doubles that wrap a real store): every
 * other member is the store's own, methods bound to it, so the adapter's class keeps working.
 */
export function withOverrides<Overrides extends object>(store: EventStore, overrides: Overrides): EventStore & Overrides {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (Object.hasOwn(overrides, property)) return Reflect.get(overrides, property);
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  }) as EventStore & Overrides;
}

/**
 * A migrated, empty event store on a fresh database. On the PostgreSQL server its reads wait for
 * its own appends to become visible (`sharedServer`, the default there: see awaitingOwnAppends).
 */
export async function openStore(
  openDb: () => Promise<Database>,
  options: { pollIntervalMs?: number; sharedServer?: boolean } = {},
): Promise<StoreFixture> {
  const db = await openDb();
  await migrateEventStore(db.knex);
  const schemas = testSchemas();
  const postgresStore = createPostgresEventStore(db, { schemas, pollIntervalMs: options.pollIntervalMs });
  const store = (options.sharedServer ?? db.kind === 'postgres') ? awaitingOwnAppends(postgresStore) : postgresStore;
  return {
    db,
    store,
    schemas,
    close: async () => {
      await postgresStore.close();
      await db.close();
    },
  };
}

export const metadata = { repositoryId: 'repo-1', actor: 'user-1', causationId: null, correlationId: null };

export function thing(name: string, extra: Record<string, unknown> = {}): NewEvent {
  return { type: 'ThingHappened', data: { name, count: 1, ...extra }, metadata };
}

function other(value: number, repositoryId: string | null = 'repo-1'): NewEvent {
  return { type: 'OtherHappened', data: { value }, metadata: { ...metadata, repositoryId } };
}

/** `what` names the condition in the timeout's message; a function is asked at the timeout (say, for a log). */
export async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what: string | (() => string) = 'condition',
  intervalMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

function positions(events: readonly RecordedEvent[]): number[] {
  return events.map((event) => event.globalPosition);
}

function isStrictlyIncreasing(values: readonly number[]): boolean {
  return values.every((value, index) => index === 0 || value > values[index - 1]);
}

/** One fresh, empty store for one subtest of the port contract. */
export interface ContractStore {
  store: EventStore;
  close(): Promise<void>;
}

export interface PortContractOptions {
  /** Opens a fresh, empty store; `pollIntervalMs` is for adapters that poll (others ignore it). */
  open(options: { pollIntervalMs?: number }): Promise<ContractStore>;
  /**
   * Where an event id is known: in the whole log (PostgreSQL: a unique index, so a stored id is
   * refused on any stream), or only in its stream (EventStoreDB keeps no index of event ids: a
   * retried write is recognised within its stream, the same id on another stream is a new event).
   */
  eventIdScope: 'log' | 'stream';
}

/**
 * The EventStore contract on PostgreSQL: the port contract plus what only the PostgreSQL store
 * has (migrations, appendInTransaction). `openDb` opens a fresh, empty database for each subtest.
 */
export function eventStoreContract(t: Test, openDb: () => Promise<Database>, options: { sharedServer?: boolean } = {}): void {
  eventStorePortContract(t, { open: (openOptions) => openStore(openDb, { ...openOptions, ...options }), eventIdScope: 'log' });
  postgresStoreContract(t, () => openStore(openDb, options));
}

/** The EventStore port's contract, for any adapter. */
export function eventStorePortContract(t: Test, options: PortContractOptions): void {
  const withStore = (name: string, body: (t: Test, fixture: ContractStore) => Promise<void>, pollIntervalMs?: number) =>
    t.test(name, async (t) => {
      const fixture = await options.open({ pollIntervalMs });
      t.teardown(() => fixture.close());
      await body(t, fixture);
    });

  withStore('an empty store', async (t, { store }) => {
    t.equal(await store.headPosition(), 0, 'an empty log has head 0');
    t.same(await store.readAll(), []);
    t.same(await store.readStream('thing-none'), []);
  });

  withStore('append stores the envelope and reads it back', async (t, { store }) => {
    const fixedId = randomUUID();
    const result = await store.append(
      'thing-1',
      [
        { ...thing('a', { tags: ['x', 'y'] }), eventId: fixedId, schemaVersion: 2 },
        {
          type: 'ThingHappened',
          data: { name: 'b', count: 2, detail: { level: 3 } },
          metadata: { repositoryId: null, actor: 'system:test', causationId: fixedId, correlationId: 'corr-1' },
        },
      ],
      'no_stream',
    );
    t.equal(result.nextExpectedVersion, 1);
    t.equal(result.events.length, 2);
    const [first, second] = result.events;
    t.equal(first.eventId, fixedId, 'a caller-chosen event id is kept');
    t.match(second.eventId, /^[0-9a-f-]{36}$/, 'an event id is generated otherwise');
    t.same([first.streamVersion, second.streamVersion], [0, 1]);
    t.ok(first.globalPosition >= 1 && second.globalPosition > first.globalPosition);
    t.equal(result.lastPosition, second.globalPosition);
    t.equal(first.schemaVersion, 2);
    t.equal(second.schemaVersion, 1, 'schema version defaults to 1');
    t.same(first.data, { name: 'a', count: 1, tags: ['x', 'y'], note: null, detail: null }, 'missing optional fields become null');
    t.same(second.data, { name: 'b', count: 2, tags: [], note: null, detail: { level: 3 } });
    t.same(
      [second.repositoryId, second.actor, second.causationId, second.correlationId],
      [null, 'system:test', fixedId, 'corr-1'],
    );
    t.equal(first.repositoryId, 'repo-1');
    t.ok(Math.abs(Date.parse(first.occurredAt) - Date.now()) < 60_000, 'occurredAt is the recording time');
    t.match(first.occurredAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);

    t.same(await store.readStream('thing-1'), result.events, 'readStream returns the stored events');
    t.same(await store.readAll(), result.events, 'readAll returns the stored events');
    t.equal(await store.headPosition(), second.globalPosition);
    t.same(positions(await store.readStream('thing-1', { fromVersion: 1 })), [second.globalPosition]);
    t.same(positions(await store.readStream('thing-1', { limit: 1 })), [first.globalPosition]);
    await t.rejects(store.readStream('thing-1', { fromVersion: -1 }), RangeError);
  });

  withStore('expected versions', async (t, { store }) => {
    await store.append('s-new', [thing('a')], 'no_stream');
    const noStream = await t.rejects(store.append('s-new', [thing('b')], 'no_stream'), ConcurrencyError);
    t.match(noStream, { streamId: 's-new', expected: 'no_stream', actual: 0 });

    const exists = await t.rejects(store.append('s-missing', [thing('a')], 'stream_exists'), ConcurrencyError);
    t.match(exists, { actual: 'no_stream' });
    t.equal((await store.append('s-new', [thing('b')], 'stream_exists')).nextExpectedVersion, 1);

    t.equal((await store.append('s-any', [thing('a')], 'any')).nextExpectedVersion, 0, 'any creates a stream');
    t.equal((await store.append('s-any', [thing('b'), thing('c')], 'any')).nextExpectedVersion, 2, 'any appends');

    t.equal((await store.append('s-new', [thing('c')], 1)).nextExpectedVersion, 2, 'exact version');
    const stale = await t.rejects(store.append('s-new', [thing('d')], 1), ConcurrencyError);
    t.match(stale, { expected: 1, actual: 2 });
    const ahead = await t.rejects(store.append('s-new', [thing('d')], 5), ConcurrencyError);
    t.match(ahead, { expected: 5, actual: 2 });
    const missing = await t.rejects(store.append('s-missing', [thing('a')], 0), ConcurrencyError);
    t.match(missing, { actual: 'no_stream' });

    for (const bad of [-1, 1.5, 'latest', Number.NaN] as const) {
      // Deliberately outside ExpectedVersion: a caller bug must not reach the database.
      await t.rejects(store.append('s-new', [thing('x')], bad as never), RangeError, `expected ${String(bad)} refused`);
    }
    await t.rejects(store.append('', [thing('x')], 'any'), RangeError, 'empty stream id refused');

    t.same((await store.readStream('s-new')).map((event) => event.data.name), ['a', 'b', 'c'], 'refused appends stored nothing');
    t.same((await store.readStream('s-missing')).length, 0);

    const empty = await store.append('s-new', [], 2);
    t.same(empty, { nextExpectedVersion: 2, lastPosition: 0, events: [] }, 'an empty append only checks the version');
    await t.rejects(store.append('s-new', [], 0), ConcurrencyError, 'an empty append still checks the version');
    t.equal((await store.append('s-empty', [], 'no_stream')).nextExpectedVersion, -1);
    t.same(await store.readStream('s-empty'), [], 'an empty append creates no stream');
    await store.append('s-empty', [thing('a')], 'no_stream');
  });

  withStore('readStreams reads several whole streams at once', async (t, { store }) => {
    await store.append('many-a', [thing('a1'), thing('a2')], 'no_stream');
    await store.append('many-b', [thing('b1')], 'no_stream');
    await store.append('many-a', [thing('a3')], 1);
    const read = await store.readStreams(['many-b', 'many-a', 'many-none']);
    t.same([...read.keys()].sort(), ['many-a', 'many-b', 'many-none'], 'every stream asked for has an entry');
    t.same(read.get('many-a'), await store.readStream('many-a'), 'a stream in version order, as readStream returns it');
    t.same(read.get('many-b'), await store.readStream('many-b'));
    t.same(read.get('many-none'), [], 'a stream that does not exist is empty');
    t.same((await store.readStreams([])).size, 0, 'nothing asked, nothing read');
  });

  withStore('readStreams leaves out the data fields a reader names, by event type, and nothing else', async (t, { store }) => {
    const tags = Array.from({ length: 500 }, (_, index) => `tag-${index}`);
    await store.append('slim-a', [thing('a1', { tags, note: 'kept' }), other(7)], 'no_stream');
    await store.append('slim-b', [thing('b1')], 'no_stream');
    const full = await store.readStreams(['slim-a', 'slim-b']);
    const slim = await store.readStreams(['slim-a', 'slim-b'], { omitData: { ThingHappened: ['tags', 'count', 'absent'], Unknown: ['value'] } });
    const without = (data: Record<string, unknown> | undefined, ...fields: string[]) => Object.fromEntries(Object.entries(data ?? {}).filter(([field]) => !fields.includes(field)));
    t.same(full.get('slim-a')?.[0].data.tags, tags, 'stored whole');
    t.same(slim.get('slim-a')?.[0].data, without(full.get('slim-a')?.[0].data, 'tags', 'count'), 'the named fields are gone; a field not present is no error');
    t.equal(slim.get('slim-a')?.[0].data.note, 'kept', 'the others are kept');
    t.same(slim.get('slim-a')?.[1], full.get('slim-a')?.[1], 'an event of another type is as stored');
    t.same(slim.get('slim-b')?.[0].data, without(full.get('slim-b')?.[0].data, 'tags', 'count'));
    const withoutData = (events: RecordedEvent[] | undefined) => events?.map(({ data: _data, ...envelope }) => envelope);
    t.same(withoutData(slim.get('slim-a')), withoutData(full.get('slim-a')), 'the envelopes are as stored');
    t.same(await store.readStreams(['slim-a'], { omitData: {} }), new Map([['slim-a', full.get('slim-a')]]), 'nothing named: whole events');
    t.same((await store.readStream('slim-a'))[0].data.tags, tags, 'nothing was changed in the store');
  });

  withStore('readStreams reads on after the versions a reader names', async (t, { store }) => {
    await store.append('after-a', [thing('a0'), thing('a1'), thing('a2')], 'no_stream');
    await store.append('after-b', [thing('b0')], 'no_stream');
    const whole = await store.readStreams(['after-a', 'after-b', 'after-none']);
    const read = await store.readStreams(['after-a', 'after-b', 'after-none'], { after: { 'after-a': 0, 'after-b': 0, 'after-none': 3 } });
    t.same(read.get('after-a'), whole.get('after-a')?.slice(1), 'the events after version 0, in order');
    t.same(read.get('after-b'), [], 'nothing after the last version');
    t.same(read.get('after-none'), [], 'a stream that does not exist is empty');
    t.same((await store.readStreams(['after-a'], { after: { 'after-a': 1 }, omitData: { ThingHappened: ['count'] } })).get('after-a')?.map((event) => event.data.count), [undefined], 'with omitData');
    t.same((await store.readStreams(['after-a', 'after-b'], { after: { 'after-a': 2 } })).get('after-b'), whole.get('after-b'), 'a stream not named is read whole');
  });

  withStore('appendToStreams: each part with its own expected version, a refused part leaves the others stored', async (t, { store }) => {
    await store.append('multi-old', [thing('o1')], 'no_stream');
    await store.append('multi-stale', [thing('s1'), thing('s2')], 'no_stream');
    const outcomes = await store.appendToStreams([
      { streamId: 'multi-new', events: [thing('n1'), thing('n2')], expected: 'no_stream' },
      { streamId: 'multi-stale', events: [thing('s3')], expected: 0 },
      { streamId: 'multi-old', events: [thing('o2')], expected: 0 },
      { streamId: 'multi-missing', events: [thing('m1')], expected: 'stream_exists' },
      { streamId: 'multi-check', events: [], expected: 'no_stream' },
    ]);
    t.same(outcomes.map((outcome) => outcome.streamId), ['multi-new', 'multi-stale', 'multi-old', 'multi-missing', 'multi-check'], 'outcomes in the order asked');
    const [created, stale, old, missing, check] = outcomes;
    t.same(created.result?.events.map((event) => [event.streamVersion, event.data.name]), [[0, 'n1'], [1, 'n2']]);
    t.equal(created.result?.nextExpectedVersion, 1);
    t.equal(created.result?.lastPosition, created.result?.events[1].globalPosition);
    t.ok(stale.conflict instanceof ConcurrencyError, 'a stale part is refused with a ConcurrencyError');
    t.match(stale.conflict, { streamId: 'multi-stale', expected: 0, actual: 1 });
    t.notOk(stale.result);
    t.same(old.result?.events.map((event) => [event.streamVersion, event.data.name]), [[1, 'o2']]);
    t.match(missing.conflict, { streamId: 'multi-missing', expected: 'stream_exists', actual: 'no_stream' });
    t.same(check.result, { nextExpectedVersion: -1, lastPosition: 0, events: [] }, 'an empty part only checks the version');

    t.same(await store.readStream('multi-new'), created.result?.events, 'the stored events read back as returned');
    t.same((await store.readStream('multi-stale')).map((event) => event.data.name), ['s1', 's2'], 'the refused part stored nothing');
    t.same((await store.readStream('multi-old')).map((event) => event.data.name), ['o1', 'o2']);
    t.same(await store.readStream('multi-missing'), [], 'a refused part creates no stream');
    t.same(await store.readStream('multi-check'), []);
    const log = await store.readAll();
    t.ok(isStrictlyIncreasing(positions(log)), 'positions stay in log order');
    t.equal(log.length, 6);
    t.equal((await store.append('multi-missing', [thing('m1')], 'no_stream')).nextExpectedVersion, 0, 'a refused new stream can be created later');

    const eventId = randomUUID();
    await store.append('multi-retried', [{ ...thing('r1'), eventId }], 'no_stream');
    const [retried] = await store.appendToStreams([{ streamId: 'multi-retried', events: [{ ...thing('r1'), eventId }], expected: 'any' }]);
    t.ok(retried.conflict instanceof ConcurrencyError, 'a retried event id is a lost race here too');
    t.same((await store.readStream('multi-retried')).length, 1);
    t.same(await store.appendToStreams([]), [], 'nothing to append');
  });

  withStore('appendToStreams checks everything before storing anything', async (t, { store }) => {
    const bad = { type: 'ThingHappened', data: { name: 'x' }, metadata };
    await t.rejects(
      store.appendToStreams([
        { streamId: 'check-a', events: [thing('a')], expected: 'any' },
        { streamId: 'check-b', events: [bad], expected: 'any' },
      ]),
      InvalidEventError,
      'an invalid event in any part',
    );
    const twice = randomUUID();
    await t.rejects(
      store.appendToStreams([
        { streamId: 'check-a', events: [{ ...thing('a'), eventId: twice }], expected: 'any' },
        { streamId: 'check-b', events: [{ ...thing('b'), eventId: twice }], expected: 'any' },
      ]),
      InvalidEventError,
      'one event id in two parts',
    );
    await t.rejects(
      store.appendToStreams([
        { streamId: 'check-a', events: [thing('a')], expected: 'any' },
        { streamId: 'check-a', events: [thing('b')], expected: 'any' },
      ]),
      RangeError,
      'a stream named twice',
    );
    await t.rejects(store.appendToStreams([{ streamId: 'check-a', events: [thing('a')], expected: -1 as never }]), RangeError, 'a bad expected version');
    await t.rejects(store.appendToStreams([{ streamId: '', events: [thing('a')], expected: 'any' }]), RangeError, 'an empty stream id');
    t.same(await store.readAll(), [], 'nothing was stored');
  });

  withStore('appendToStreams of a large payload (about 500 KB): every part as one call would have it, a NUL stores nothing', async (t, { store }) => {
    // PostgreSQL sends at most about 256 KB a statement: these go as several, with one part refused in a later one.
    const big = (n: number) => thing(`${n}-${'v'.repeat(60_000)}`);
    const streams = Array.from({ length: 8 }, (_, n) => `large-${n}`);
    await store.append('large-6', [thing('there already')], 'no_stream');
    const outcomes = await store.appendToStreams(streams.map((streamId, n) => ({ streamId, events: [big(n)], expected: n === 6 ? 'no_stream' : 'any' })));
    t.same(outcomes.map((outcome) => outcome.streamId), streams, 'outcomes in the order of the parts');
    t.same(outcomes.map((outcome) => (outcome.conflict ? 'refused' : 'stored')), ['stored', 'stored', 'stored', 'stored', 'stored', 'stored', 'refused', 'stored']);
    for (const [n, streamId] of streams.entries()) {
      const events = await store.readStream(streamId);
      const name = n === 6 ? 'there already' : `${n}-${'v'.repeat(60_000)}`;
      t.same(events.map((event) => event.data.name), [name], `${streamId}: its own event`);
      if (n !== 6) t.equal(outcomes[n]?.result?.lastPosition, events[0]?.globalPosition, `${streamId}: its outcome's position`);
    }
    const head = await store.headPosition();
    await t.rejects(
      store.appendToStreams(streams.map((streamId, n) => ({ streamId: `nul-${streamId}`, events: [n === 7 ? thing('x\u0000y') : big(n)], expected: 'any' }))),
      InvalidEventError,
      'a NUL in the last part',
    );
    t.equal(await store.headPosition(), head, 'nothing of that call was stored');
  });

  withStore('appendToStreams racing append at the same version: exactly one wins per stream', async (t, { store }) => {
    for (let round = 0; round < 5; round += 1) {
      const streams = [`mrace-${round}-a`, `mrace-${round}-b`];
      for (const streamId of streams) await store.append(streamId, [thing('base')], 'no_stream');
      const [multi, single] = await Promise.allSettled([
        store.appendToStreams(streams.map((streamId) => ({ streamId, events: [thing('m1'), thing('m2')], expected: 0 }))),
        store.append(streams[1], [thing('s1')], 0),
      ]);
      t.equal(multi.status, 'fulfilled', 'the multi-stream append reports conflicts, it does not throw them');
      const outcomes = multi.status === 'fulfilled' ? multi.value : [];
      t.ok(outcomes[0]?.result, 'the uncontested stream is stored');
      const singleWon = single.status === 'fulfilled';
      t.equal(Boolean(outcomes[1]?.conflict), singleWon, 'the contested stream went to one of them');
      const contested = await store.readStream(streams[1]);
      t.same(contested.map((event) => event.streamVersion), singleWon ? [0, 1] : [0, 1, 2], 'no duplicate version, no partial part');
    }
  });

  withStore('a retried event id is a lost race, not a duplicate', async (t, { store }) => {
    const eventId = randomUUID();
    await store.append('retry-1', [{ ...thing('a'), eventId }], 'any');
    const again = await t.rejects(store.append('retry-1', [{ ...thing('a'), eventId }], 'any'), ConcurrencyError);
    t.match(again, { actual: 0 });
    const sameVersion = await t.rejects(store.append('retry-1', [{ ...thing('a'), eventId }], 'no_stream'), ConcurrencyError);
    t.match(sameVersion, { actual: 0 }, 'a retry at the version it was first written at also loses');
    if (options.eventIdScope === 'log') {
      await t.rejects(store.append('retry-2', [{ ...thing('a'), eventId }], 'any'), ConcurrencyError);
      t.same(await store.readStream('retry-2'), []);
    } else {
      // Documented difference: the id is only known within its stream.
      await store.append('retry-2', [{ ...thing('a'), eventId }], 'any');
      t.same((await store.readStream('retry-2')).map((event) => event.eventId), [eventId], 'another stream takes the same id as a new event');
    }
    const twice = randomUUID();
    await t.rejects(store.append('retry-3', [{ ...thing('a'), eventId: twice }, { ...thing('b'), eventId: twice }], 'any'), InvalidEventError);
    t.equal((await store.readAll()).length, options.eventIdScope === 'log' ? 1 : 2);
    t.same((await store.readStream('retry-1')).length, 1, 'the retried stream holds the event once');
  });

  withStore('two appends racing at the same version: exactly one wins', async (t, { store }) => {
    for (let round = 0; round < 10; round += 1) {
      const streamId = `race-${round}`;
      await store.append(streamId, [thing('base')], 'no_stream');
      const racers = 5;
      const outcomes = await Promise.allSettled(
        Array.from({ length: racers }, (_, racer) => store.append(streamId, [thing(`r${racer}-1`), thing(`r${racer}-2`)], 0)),
      );
      const winners = outcomes.filter((outcome) => outcome.status === 'fulfilled');
      const losers = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason as unknown] : []));
      t.equal(winners.length, 1, `round ${round}: one winner`);
      t.ok(losers.every((loser) => loser instanceof ConcurrencyError), 'the others get ConcurrencyError');
      const stream = await store.readStream(streamId);
      t.same(stream.map((event) => event.streamVersion), [0, 1, 2], 'no duplicate version, no partial batch');
      const winnerPrefix = String(stream[1].data.name).split('-')[0];
      t.equal(stream[2].data.name, `${winnerPrefix}-2`, 'the batch is whole and from one winner');
    }
    // Creating the same stream concurrently.
    const outcomes = await Promise.allSettled(
      Array.from({ length: 5 }, (_, racer) => store.append('race-create', [thing(`c${racer}`)], 'no_stream')),
    );
    t.equal(outcomes.filter((outcome) => outcome.status === 'fulfilled').length, 1, 'one creator wins');
    t.ok(
      outcomes.every((outcome) => outcome.status === 'fulfilled' || outcome.reason instanceof ConcurrencyError),
      'other creators get ConcurrencyError',
    );
    t.same((await store.readStream('race-create')).map((event) => event.streamVersion), [0]);
  });

  withStore('invalid events are refused and nothing of the batch is stored', async (t, { store }) => {
    await store.append('valid', [thing('first')], 'no_stream');
    const headBefore = await store.headPosition();
    const cases: Array<{ why: string; event: NewEvent; message: RegExp }> = [
      { why: 'unknown type', event: { type: 'NoSuchThing', data: {}, metadata }, message: /NoSuchThing.*no schema/ },
      { why: 'missing required field', event: { type: 'ThingHappened', data: { name: 'x' }, metadata }, message: /count: required field is missing/ },
      { why: 'wrong field type', event: thing('x', { count: 'one' }), message: /count: expected int/ },
      { why: 'int out of range', event: thing('x', { count: 2 ** 31 }), message: /count: expected int/ },
      { why: 'non-integer int', event: thing('x', { count: 1.5 }), message: /count/ },
      { why: 'nested field', event: thing('x', { detail: { level: 'high' } }), message: /detail\.level: expected int/ },
      { why: 'nested unknown field', event: thing('x', { detail: { level: 1, colour: 'red' } }), message: /detail\.colour: field is not in the schema/ },
      { why: 'array item', event: thing('x', { tags: ['ok', 7] }), message: /tags\[1\]: expected string/ },
      { why: 'field not in schema', event: thing('x', { extra: true }), message: /extra: field is not in the schema/ },
      { why: 'data not an object', event: { type: 'ThingHappened', data: [] as never, metadata }, message: /expected record/ },
      { why: 'null for a required field', event: thing('x', { name: null }), message: /name: expected string/ },
      { why: 'long beyond 2^53', event: { type: 'OtherHappened', data: { value: 2 ** 60 }, metadata }, message: /value: expected long/ },
      { why: 'missing actor', event: { ...thing('x'), metadata: { ...metadata, actor: '' } }, message: /actor/ },
      { why: 'bad event id', event: { ...thing('x'), eventId: 'not-a-uuid' }, message: /eventId must be a UUID/ },
      { why: 'bad schema version', event: { ...thing('x'), schemaVersion: 0 }, message: /schemaVersion/ },
      { why: 'NUL in a string', event: thing('x\u0000y'), message: /\\u0000/ },
    ];
    for (const { why, event, message } of cases) {
      const error = await t.rejects(
        store.append('valid', [thing('good-before'), event, thing('good-after')], 0),
        InvalidEventError,
        why,
      );
      t.match((error as Error).message, message, `${why}: message names the problem`);
      const fresh = await t.rejects(store.append(`fresh-${why}`, [thing('good'), event], 'no_stream'), InvalidEventError);
      t.ok(fresh, `${why}: refused on a new stream too`);
    }
    t.equal(await store.headPosition(), headBefore, 'nothing was stored');
    t.same((await store.readStream('valid')).map((event) => event.data.name), ['first']);
    t.equal((await store.readAll()).length, 1);
    t.equal((await store.append('valid', [thing('second')], 0)).nextExpectedVersion, 1, 'the stream version did not move');
  });

  withStore('readAll filters', async (t, { store }) => {
    const a = await store.append('f-a', [thing('a1'), thing('a2'), other(1)], 'no_stream');
    const b = await store.append('f-b', [other(2, 'repo-2'), thing('b1', {})], 'no_stream');
    const c = await store.append('f-c', [{ ...thing('c1'), metadata: { ...metadata, repositoryId: 'repo-2' } }], 'no_stream');
    const all = [...a.events, ...b.events, ...c.events];
    t.same(positions(await store.readAll()), positions(all), 'everything in global order');
    t.ok(isStrictlyIncreasing(positions(all)));
    t.same(positions(await store.readAll({ after: all[2].globalPosition })), positions(all.slice(3)), 'after is exclusive');
    t.same(positions(await store.readAll({ limit: 2 })), positions(all.slice(0, 2)), 'limit');
    t.same(positions(await store.readAll({ after: all[1].globalPosition, limit: 2 })), positions(all.slice(2, 4)), 'after + limit');
    t.same(await store.readAll({ limit: 0 }), []);
    t.same(await store.readAll({ after: all[5].globalPosition }), [], 'nothing after the head');
    t.same(
      positions(await store.readAll({ types: ['OtherHappened'] })),
      positions(all.filter((event) => event.type === 'OtherHappened')),
      'types',
    );
    t.same(await store.readAll({ types: [] }), [], 'an empty type list matches nothing');
    t.same(
      positions(await store.readAll({ repositoryId: 'repo-2' })),
      positions(all.filter((event) => event.repositoryId === 'repo-2')),
      'repositoryId',
    );
    t.same(positions(await store.readAll({ streamId: 'f-b' })), positions(b.events), 'streamId');
    t.same(
      positions(await store.readAll({ repositoryId: 'repo-2', types: ['ThingHappened'] })),
      positions([c.events[0]]),
      'repositoryId + types',
    );
    t.same(
      positions(await store.readAll({ streamId: 'f-a', types: ['ThingHappened'], after: a.events[0].globalPosition })),
      positions([a.events[1]]),
      'streamId + types + after',
    );
    t.same(await store.readAll({ repositoryId: 'repo-none' }), []);
    await t.rejects(store.readAll({ limit: -1 }), RangeError);
    await t.rejects(store.readAll({ after: -5 }), RangeError);
  });

  withStore('subscribe: catch-up, then live, in order', async (t, { store }) => {
    const first = await store.append('sub-1', [thing('1'), thing('2'), thing('3'), thing('4'), thing('5')], 'no_stream');
    const batches: RecordedEvent[][] = [];
    const subscription = store.subscribe({ after: 0, batchSize: 2, handler: async (batch) => void batches.push(batch) });
    await subscription.caughtUp();
    t.same(positions(batches.flat()), positions(first.events), 'catch-up delivers the history');
    t.ok(batches.every((batch) => batch.length <= 2), 'batches respect batchSize');
    const live = await store.append('sub-1', [thing('6'), thing('7'), thing('8')], 4);
    await waitUntil(() => batches.flat().length === 8, 60_000, 'live events');
    t.same(positions(batches.flat()), positions([...first.events, ...live.events]), 'live events follow in order');
    await subscription.caughtUp();
    await subscription.stop();
    await subscription.stop(); // stopping twice is harmless

    const resumed: RecordedEvent[] = [];
    const fromMiddle = store.subscribe({ after: first.events[2].globalPosition, handler: async (batch) => void resumed.push(...batch) });
    await fromMiddle.caughtUp();
    t.same(positions(resumed), positions([...first.events.slice(3), ...live.events]), 'after is exclusive');
    await fromMiddle.stop();
    await fromMiddle.caughtUp(); // nothing new: it had delivered everything before stopping
    await store.append('sub-1', [thing('9')], 7);
    await t.rejects(fromMiddle.caughtUp(), /stopped/, 'caughtUp rejects when a stopped subscription cannot reach the head');
  });

  withStore('subscribe with a type filter catches up past other types', async (t, { store }) => {
    await store.append('typed', [thing('a'), other(1), thing('b'), other(2), other(3)], 'no_stream');
    const seen: RecordedEvent[] = [];
    const subscription = store.subscribe({ after: 0, types: ['ThingHappened'], handler: async (batch) => void seen.push(...batch) });
    await subscription.caughtUp();
    t.same(seen.map((event) => event.data.name), ['a', 'b']);
    await store.append('typed', [other(4), thing('c')], 4);
    await waitUntil(() => seen.length === 3, 60_000, 'filtered live event');
    await subscription.caughtUp();
    t.equal(seen.length, 3);
    await subscription.stop();
  });

  withStore(
    'appends through the store wake its subscriptions at once',
    async (t, { store }) => {
      const seen: RecordedEvent[] = [];
      const subscription = store.subscribe({ after: 0, handler: async (batch) => void seen.push(...batch) });
      await subscription.caughtUp();
      await new Promise((resolve) => setTimeout(resolve, 100)); // let the subscription fall asleep
      await store.append('wake', [thing('a')], 'no_stream');
      // Unwoken, the subscription would sleep out its 60 s poll interval: delivery within half of
      // it is the wake. (Not sooner: on a shared server another database's transaction can hide
      // the append for a while, and a loaded machine is slow.)
      await waitUntil(() => seen.length === 1, 30_000, 'the woken subscription to deliver the append before its next poll');
      await subscription.stop();
    },
    60_000,
  );

  withStore('stop waits for the running handler; a failing handler stops the subscription', async (t, { store }) => {
    await store.append('stop', [thing('a')], 'no_stream');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let handlerStarted = false;
    let handlerFinished = false;
    const subscription = store.subscribe({
      after: 0,
      handler: async () => {
        handlerStarted = true;
        await gate;
        handlerFinished = true;
      },
    });
    // Not a fixed wait: on a loaded machine, or a server where another transaction hides the
    // append, the handler may not have begun, and stop() would then end the subscription at once.
    await waitUntil(() => handlerStarted, 60_000, 'the handler to begin');
    let stopped = false;
    const stopping = subscription.stop().then(() => (stopped = true));
    await new Promise((resolve) => setTimeout(resolve, 100));
    t.notOk(stopped, 'stop has not resolved while the handler runs');
    release();
    await stopping;
    t.ok(handlerFinished, 'the handler finished before stop resolved');

    const errors: unknown[] = [];
    let calls = 0;
    const failing = store.subscribe({
      after: 0,
      handler: async () => {
        calls += 1;
        throw new Error('projection bug');
      },
      onError: (error) => errors.push(error),
    });
    await t.rejects(failing.caughtUp(), /projection bug/, 'caughtUp rejects with the failure');
    t.equal(errors.length, 1, 'onError called once');
    t.match(errors[0], { message: 'projection bug' });
    await store.append('stop', [thing('b')], 0);
    await new Promise((resolve) => setTimeout(resolve, 300));
    t.equal(calls, 1, 'no delivery after the failure');
    await failing.stop();
  });

  withStore('concurrent writers: a subscriber sees every position once, strictly increasing', async (t, { store }) => {
    const observed: number[] = [];
    const subscription = store.subscribe({
      after: 0,
      batchSize: 7,
      handler: async (batch) => {
        observed.push(...positions(batch));
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
      },
    });
    // A tail reader polling readAll: a position at or below one it has already passed must never appear later.
    const tailSeen = new Set<number>();
    let tailPassed = 0;
    let lateFills = 0;
    let writing = true;
    const tail = (async () => {
      while (writing) {
        for (const position of positions(await store.readAll({ limit: 100_000 }))) {
          if (tailSeen.has(position)) continue;
          if (position <= tailPassed) lateFills += 1;
          tailSeen.add(position);
          tailPassed = Math.max(tailPassed, position);
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const writers = 8;
    const appendsPerWriter = 25;
    const appended: number[] = [];
    await Promise.all(
      Array.from({ length: writers }, async (_, writer) => {
        for (let index = 0; index < appendsPerWriter; index += 1) {
          const size = 1 + ((writer + index) % 3);
          const events = Array.from({ length: size }, (_, n) => thing(`w${writer}-${index}-${n}`));
          // Every writer also fights over one shared stream with 'any'.
          const streamId = index % 5 === 0 ? 'shared' : `writer-${writer}`;
          const result = await store.append(streamId, events, 'any');
          appended.push(...positions(result.events));
        }
      }),
    );
    writing = false;
    await tail;
    await subscription.caughtUp();
    await subscription.stop();
    const all = positions(await store.readAll({ limit: 100_000 }));
    t.equal(lateFills, 0, 'no reader ever saw a position appear behind one it had passed');
    t.ok(isStrictlyIncreasing(observed), 'observed positions strictly increase');
    t.same(observed, all, 'the subscriber saw every stored event exactly once');
    t.same([...appended].sort((x, y) => x - y), all, 'every appended event is in the log');
    const shared = await store.readStream('shared');
    t.same(
      shared.map((event) => event.streamVersion),
      shared.map((_, index) => index),
      'the shared stream has contiguous versions',
    );
  });
}

/** What only the PostgreSQL store has: its migrations and appends inside a caller's transaction. */
function postgresStoreContract(t: Test, open: () => Promise<StoreFixture>): void {
  const withStore = (name: string, body: (t: Test, fixture: StoreFixture) => Promise<void>) =>
    t.test(name, async (t) => {
      const fixture = await open();
      t.teardown(() => fixture.close());
      await body(t, fixture);
    });

  withStore('migration is idempotent', async (t, { db, store }) => {
    await migrateEventStore(db.knex);
    await Promise.all([migrateEventStore(db.knex), migrateEventStore(db.knex)]);
    t.equal(await store.headPosition(), 0, 'an empty log has head 0');
    t.same(await store.readAll(), []);
    t.same(await store.readStream('thing-none'), []);
  });

  withStore('ANALYZE keeps no statistics of the columns no read filters on', async (t, { db, store }) => {
    for (let i = 0; i < 20; i++) await store.append(`thing-${i}`, [thing(`n${i}`, { note: 'x'.repeat(200) })], 'no_stream');
    await db.knex.raw('ANALYZE events');
    await migrateEventStore(db.knex); // again: leaves the setting as it is
    await db.knex.raw('ANALYZE events');
    const { rows } = (await db.knex.raw(`SELECT attname FROM pg_stats WHERE tablename = 'events' ORDER BY attname`)) as { rows: Array<{ attname: string }> };
    const analyzed = rows.map((row) => row.attname);
    t.same(analyzed.filter((column) => (unfilteredEventColumns as readonly string[]).includes(column)), [], 'none of the payload and provenance columns');
    for (const column of ['global_position', 'stream_id', 'stream_version', 'type', 'repository_id', 'event_id']) t.ok(analyzed.includes(column), `${column} has statistics`);
  });

  withStore('appendInTransaction commits or rolls back with the caller', async (t, { db, store, schemas }) => {
    await db.knex.transaction(async (trx) => {
      await appendInTransaction(trx, schemas, 'trx-1', [thing('a')], 'no_stream');
    });
    t.equal((await store.readStream('trx-1')).length, 1, 'committed');
    await t.rejects(
      db.knex.transaction(async (trx) => {
        await appendInTransaction(trx, schemas, 'trx-2', [thing('a')], 'no_stream');
        throw new Error('caller failed');
      }),
      /caller failed/,
    );
    t.same(await store.readStream('trx-2'), [], 'rolled back with the caller');
    await db.knex.transaction(async (trx) => {
      const conflict = await t.rejects(appendInTransaction(trx, schemas, 'trx-1', [thing('b')], 'no_stream'), ConcurrencyError);
      t.match(conflict, { actual: 0 });
      const after = await trx.raw('SELECT 1 AS ok');
      t.equal((after as { rows: Array<{ ok: number }> }).rows[0].ok, 1, 'the transaction is still usable after a refused append');
    });
    await db.knex.schema.createTable('side_effects', (table) => table.integer('n'));
    await t.rejects(
      db.knex.transaction(async (trx) => {
        await trx('side_effects').insert({ n: 1 });
        await appendInTransaction(trx, schemas, 'trx-3', [thing('a')], 'no_stream');
      }),
      /first write of its transaction/,
      'an append after another write is refused (it could break the gap-free order)',
    );
    t.same(await store.readStream('trx-3'), []);
  });

  withStore('recentHeadPosition: the head as this process last read it, if recent enough', async (t, { db, store }) => {
    const recent = (maxAgeMs: number) => store.recentHeadPosition?.(maxAgeMs);
    t.equal(recent(60_000), null, 'unknown before anything was read');
    const first = await store.append('recent-1', [thing('a')], 'no_stream');
    t.equal(recent(60_000), null, 'an append alone does not make it known');
    t.equal(await store.headPosition(), first.lastPosition);
    t.equal(recent(60_000), first.lastPosition, 'headPosition read it');
    const second = await store.append('recent-1', [thing('b')], 0);
    // On PGlite a committed append is visible at once; on a server an older transaction may hide it.
    t.equal(recent(60_000), db.kind === 'pglite' ? second.lastPosition : first.lastPosition, 'an append raises it on PGlite only');
    await new Promise((resolve) => setTimeout(resolve, 5));
    t.equal(recent(1), null, 'a read older than maxAgeMs does not answer');

    const subscription = store.subscribe({ after: 0, batchSize: 1, handler: async () => undefined });
    t.teardown(() => subscription.stop());
    await subscription.caughtUp();
    const third = await store.append('recent-2', [thing('c')], 'no_stream');
    // As long as the contract waits for its own appends: on a server other transactions can hide this one a while.
    await waitUntil(() => recent(60_000) === third.lastPosition, 60_000, "the subscription's reads to reach the new head");
    // A window wider than waitUntil's 10 ms between looks, and narrower than the server's 50 ms polls:
    // at 2 ms, a look had to fall within 2 ms of a poll's answer, and a busy process's looks missed
    // that poll after poll (up to nine of PGlite's 250 ms polls with 8 ms pauses injected).
    await new Promise((resolve) => setTimeout(resolve, 25));
    await waitUntil(() => recent(20) !== null, 10_000, 'an idle poll that finds nothing new to make it recent again');
    t.equal(recent(60_000), third.lastPosition, 'and it is still the head');
  });
}

/**
 * Server only: an append held open in a transaction hides every later position from readers
 * until it commits, and a subscriber then sees both in order. Its stores read without waiting for
 * their own appends (`sharedServer: false`): the held append is meant to be observed hidden.
 */
export function inFlightAppendContract(t: Test, openDb: () => Promise<Database>): void {
  t.test('an in-flight append hides later positions until it commits', async (t) => {
    const fixture = await openStore(openDb, { sharedServer: false });
    t.teardown(() => fixture.close());
    const { db, store, schemas } = fixture;
    const before = await store.append('before', [thing('0')], 'no_stream');
    // This store reads without waiting for its own appends: another database's transaction may
    // still hide the first one, and the subscriber would then be caught up without it.
    await waitUntil(async () => (await store.headPosition()) >= before.lastPosition, 60_000, 'the first append visible');
    const seen: RecordedEvent[] = [];
    const subscription = store.subscribe({ after: 0, handler: async (batch) => void seen.push(...batch) });
    await subscription.caughtUp();

    const held = await db.knex.transaction();
    let heldResult;
    try {
      heldResult = await appendInTransaction(held, schemas, 'held', [thing('held')], 'no_stream');
      const later = await store.append('later', [thing('later')], 'no_stream');
      t.ok(later.lastPosition > heldResult.lastPosition, 'the later append has the later position');
      const visible = positions(await store.readAll());
      t.notOk(visible.includes(later.lastPosition), 'readAll hides the committed later append');
      t.notOk(visible.includes(heldResult.lastPosition), 'and of course the uncommitted one');
      t.ok((await store.headPosition()) < heldResult.lastPosition, 'headPosition stays below the in-flight append');
      t.ok((store.recentHeadPosition?.(60_000) ?? 0) < later.lastPosition, 'so does the head it last read: a server append does not raise it');
      t.equal((await store.readStream('later')).length, 1, 'readStream sees committed events at once');
      await new Promise((resolve) => setTimeout(resolve, 300)); // several polls
      t.same(positions(seen), positions(before.events), 'the subscriber has not moved past the in-flight append');
      await held.commit();
      const expected = [...before.events, heldResult.events[0], later.events[0]];
      await waitUntil(() => seen.length === 3, 30_000, 'both appends delivered');
      t.same(positions(seen), positions(expected), 'the subscriber sees both, in order, with no skip');
    } finally {
      if (!held.isCompleted()) await held.rollback();
      await subscription.stop();
    }
  });

  t.test('a rolled-back in-flight append leaves a permanent gap, never a late fill', async (t) => {
    const fixture = await openStore(openDb, { sharedServer: false });
    t.teardown(() => fixture.close());
    const { db, store, schemas } = fixture;
    const held = await db.knex.transaction();
    const heldResult = await appendInTransaction(held, schemas, 'held', [thing('held')], 'no_stream');
    const later = await store.append('later', [thing('later')], 'no_stream');
    t.same(await store.readAll(), []);
    await held.rollback();
    // Visible once no older transaction runs anywhere on the server (other suites share it).
    await waitUntil(async () => (await store.headPosition()) >= later.lastPosition, 60_000, 'the later append visible');
    const visible = positions(await store.readAll());
    t.same(visible, [later.lastPosition]);
    t.notOk(visible.includes(heldResult.lastPosition));
  });
}
