import t, { type Test } from 'tap';
import { sourceDecider, type SourceCommand } from '../../../src/domain/source/decider.js';
import { FoldedStates, foldStream, handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import { commandFrom, failSourceOfDeadJob, loadStream, sharedCommandFrom, sharedCommandsFrom, SharedStreamWriter } from '../../../src/pipeline/stages/common.js';
import { factDecider } from '../../../src/domain/fact/decider.js';
import { withOverrides } from '../../eventstore/contract.js';
import { openStageFixture, testMetadata } from '../stageFixture.js';
import { runeLength } from '../../../src/util/codePoints.js';
import { boundedErrorMessage, MAX_KEPT_ERROR_CHARS } from '../../../src/util/errorMessage.js';
import { MAX_ATTEMPT_ERROR_CHARS, MAX_TASK_ERROR_CHARS } from '../../../src/pipeline/jobs.js';

/** Deciding on a stream read once: the same outcome as handleCommand, one read less when nothing moved. */
t.test('commandFrom and sharedCommandFrom', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const register = { type: 'RegisterSource', origin: 'url', url: 'https://example.org/a', doi: null } as const;

  t.test('appends on the loaded version and returns the stream after it', async (t) => {
    const stream = streamName('source', crypto.randomUUID());
    const loaded = await loadStream(fixture.store, stream, sourceDecider);
    t.equal(loaded.version, null, 'no stream yet');
    let reads = 0;
    const counting = withOverrides(fixture.store, {
      readStream: (...args: Parameters<typeof fixture.store.readStream>) => {
        reads++;
        return fixture.store.readStream(...args);
      },
    });
    const { result, after } = await commandFrom(counting, stream, sourceDecider, loaded, register, metadata);
    t.equal(reads, 0, 'nothing read again');
    t.same(result.events.map((event) => event.type), ['SourceRegistered']);
    t.equal(after.version, 0);
    t.equal(after.state.status, 'pending');
    const next = await commandFrom(counting, stream, sourceDecider, after, { type: 'StartFetch' }, metadata, { retries: 0 });
    t.equal(next.after.state.status, 'fetching');
    t.same((await fixture.store.readStream(stream)).map((event) => event.type), ['SourceRegistered', 'SourceFetchStarted'], 'as stored');
    const nothing = await commandFrom(counting, stream, sourceDecider, next.after, { type: 'StartFetch' }, metadata);
    t.same(nothing.result.events, [], 'a command that decides nothing appends nothing');
    t.equal(reads, 0);
  });

  t.test('a stream that moved since it was read is read and decided again', async (t) => {
    const stream = streamName('source', crypto.randomUUID());
    await handleCommand(fixture.store, stream, sourceDecider, register, metadata);
    const stale = await loadStream(fixture.store, stream, sourceDecider);
    // A twin started the fetch meanwhile: StartFetch on the fresh state decides nothing more.
    await handleCommand(fixture.store, stream, sourceDecider, { type: 'StartFetch' }, metadata);
    const { result, after } = await commandFrom(fixture.store, stream, sourceDecider, stale, { type: 'StartFetch' }, metadata, { retries: 0 });
    t.same(result.events, [], 'decided on the stream as it is now');
    t.equal(after.version, 1, 'the returned stream is the current one');
    t.equal((await fixture.store.readStream(stream)).length, 2, 'no second SourceFetchStarted');
    const shared = await sharedCommandFrom(fixture.store, stream, sourceDecider, stale, { type: 'StartFetch' }, metadata);
    t.same(shared.events, [], 'sharedCommandFrom re-decides too');
  });

  t.test('sharedCommandsFrom: one multi-stream append; a moved stream is re-decided alone', async (t) => {
    const [fresh, moved, settled] = [0, 1, 2].map(() => streamName('fact', crypto.randomUUID()));
    const sourceId = crypto.randomUUID();
    const loaded = await Promise.all([fresh, moved, settled].map((stream) => loadStream(fixture.store, stream, factDecider)));
    await handleCommand(fixture.store, settled, factDecider, { type: 'StabilizeFact', sourceId }, metadata);
    const settledNow = await loadStream(fixture.store, settled, factDecider);
    // A twin merged `moved` after it was read: the stale stabilization must not be appended.
    await handleCommand(fixture.store, moved, factDecider, { type: 'MergeFact', survivorId: 'x', similarity: 0.99, sourceId, catchup: false }, metadata);
    let multiAppends = 0;
    let appends = 0;
    const counting = withOverrides(fixture.store, {
      appendToStreams: (...args: Parameters<typeof fixture.store.appendToStreams>) => {
        multiAppends++;
        return fixture.store.appendToStreams(...args);
      },
      append: (...args: Parameters<typeof fixture.store.append>) => {
        appends++;
        return fixture.store.append(...args);
      },
    });
    const stabilize = { type: 'StabilizeFact', sourceId } as const;
    const results = await sharedCommandsFrom(
      counting,
      factDecider,
      [
        { streamId: fresh, loaded: loaded[0], command: stabilize },
        { streamId: moved, loaded: loaded[1], command: stabilize },
        { streamId: settled, loaded: settledNow, command: stabilize },
      ],
      metadata,
    );
    t.equal(multiAppends, 1, 'one multi-stream append for everything decided');
    t.same(results.map((result) => result.state.status), ['stable', 'merged', 'stable'], 'each outcome as the stream has it');
    t.same(results.map((result) => result.events.map((event) => event.type)), [['FactStabilized'], [], []], 'the moved stream was re-decided: nothing more');
    t.ok(results[0].write && results[0].position !== null, 'where the append landed');
    t.equal(results[2].write, null, 'a command that decides nothing writes nothing');
    t.equal(appends, 0, 're-deciding a moved stream appended nothing here');
    t.same((await fixture.store.readStream(moved)).map((event) => event.type), ['FactMergedInto'], 'the twin\'s decision stands');
    t.same((await fixture.store.readStream(fresh)).map((event) => event.type), ['FactStabilized']);
    t.same(await sharedCommandsFrom(counting, factDecider, [], metadata), [], 'nothing to decide');
    t.equal(multiAppends, 1);
  });
});

t.test('SharedStreamWriter: a job\'s commands on one stream, each on the stream as the last left it', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const batch = (batchIndex: number): SourceCommand => ({ type: 'RecordConceptBatch', modelId: 'm', promptsetHash: 'p', batchIndex, batchCount: 4, links: [] });
  const counted = () => {
    const calls = { reads: 0, appends: 0, conflicts: 0 };
    const store = withOverrides(fixture.store, {
      readStream: (...args: Parameters<typeof fixture.store.readStream>) => {
        calls.reads++;
        return fixture.store.readStream(...args);
      },
      append: async (...args: Parameters<typeof fixture.store.append>) => {
        calls.appends++;
        try {
          return await fixture.store.append(...args);
        } catch (error) {
          calls.conflicts++;
          throw error;
        }
      },
    });
    return { calls, store };
  };

  t.test('given a stream read once, when its parts record side by side, then no read and no race between them', async (t) => {
    const source = await fixture.addSource(repositoryId, ['Writers take turns.']);
    const stream = streamName('source', source.sourceId);
    const { calls, store } = counted();
    const writer = new SharedStreamWriter(store, stream, sourceDecider, await loadStream(fixture.store, stream, sourceDecider), metadata);
    const results = await Promise.all([0, 1, 2].map((index) => writer.execute(batch(index))));
    t.same(results.map((result) => result.events.map((event) => event.type)), [['ConceptsExtracted'], ['ConceptsExtracted'], ['ConceptsExtracted']]);
    t.same(calls, { reads: 0, appends: 3, conflicts: 0 });
    const stored = await fixture.eventsOf(stream, 'ConceptsExtracted');
    t.same(stored.map((event) => event.data.batch_index), [0, 1, 2], 'in the order asked');
    t.same((await writer.execute(batch(1))).events, [], 'a part recorded before records nothing');
  });

  t.test('given another writer moved the stream, then the part is re-decided on the stream as it is', async (t) => {
    const source = await fixture.addSource(repositoryId, ['Twins race.']);
    const stream = streamName('source', source.sourceId);
    const { calls, store } = counted();
    const writer = new SharedStreamWriter(store, stream, sourceDecider, await loadStream(fixture.store, stream, sourceDecider), metadata);
    await handleCommand(fixture.store, stream, sourceDecider, batch(1), metadata);
    t.same((await writer.execute(batch(1))).events, [], 'the twin recorded batch 1: nothing more');
    t.same((await writer.execute(batch(2))).events.map((event) => event.type), ['ConceptsExtracted'], 'the next part appends on the fresh stream');
    t.equal(calls.conflicts, 1, 'one race lost, to the other writer');
    t.same((await fixture.eventsOf(stream, 'ConceptsExtracted')).map((event) => event.data.batch_index), [1, 2]);
  });

  t.test('given a part the decider refuses, then only its caller fails', async (t) => {
    const source = await fixture.addSource(repositoryId, ['Refusals stay local.']);
    const stream = streamName('source', source.sourceId);
    const writer = new SharedStreamWriter(fixture.store, stream, sourceDecider, await loadStream(fixture.store, stream, sourceDecider), metadata);
    const [refused, fine] = await Promise.allSettled([writer.execute(batch(9)), writer.execute(batch(0))]);
    t.match(refused, { status: 'rejected', reason: { code: 'invalid' } });
    t.match(fine, { status: 'fulfilled' });
    t.same((await fixture.eventsOf(stream, 'ConceptsExtracted')).map((event) => event.data.batch_index), [0]);
  });
});

t.test('FoldedStates: a stream read before is read on from its version, to the state of the whole stream', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const [one, two] = [streamName('source', crypto.randomUUID()), streamName('source', crypto.randomUUID())];
  const asked: Array<Record<string, number> | undefined> = [];
  const counting = withOverrides(fixture.store, {
    readStreams: (...args: Parameters<typeof fixture.store.readStreams>) => {
      asked.push(args[1]?.after);
      return fixture.store.readStreams(...args);
    },
  });
  const folded = new FoldedStates(sourceDecider, 1);
  const register = { type: 'RegisterSource', origin: 'url', url: 'https://example.org/a', doi: null } as const;
  await handleCommand(fixture.store, one, sourceDecider, register, metadata);
  const first = await folded.load(counting, [one]);
  t.same(asked.at(-1), {}, 'nothing kept: read whole');
  t.equal(first.get(one)?.state.status, 'pending');
  await handleCommand(fixture.store, one, sourceDecider, { type: 'StartFetch' }, metadata);
  const second = await folded.load(counting, [one]);
  t.same(asked.at(-1), { [one]: 0 }, 'read on after version 0');
  t.same(second.get(one)?.events.map((event) => event.type), ['SourceFetchStarted'], 'only the new events come back');
  t.same({ state: second.get(one)?.state, version: second.get(one)?.version }, (({ state, version }) => ({ state, version }))(foldStream(await fixture.store.readStream(one), sourceDecider)), 'the state and version of the whole stream');
  const unchanged = await folded.load(counting, [one]);
  t.same(unchanged.get(one)?.events, [], 'nothing new');
  t.equal(unchanged.get(one)?.version, 1, 'the kept version');
  t.equal(unchanged.get(one)?.state.status, 'fetching', 'the kept state');
  const missing = await folded.load(counting, [two]);
  t.equal(missing.get(two)?.version, null, 'a stream that does not exist: nothing kept');
  await handleCommand(fixture.store, two, sourceDecider, register, metadata);
  await folded.load(counting, [two]);
  await folded.load(counting, [one]);
  t.same(asked.at(-1), {}, 'capacity 1: the least recently read was let go, and is read whole');
  t.throws(() => new FoldedStates(sourceDecider, 0), RangeError);
});

/** A source whose fetch started, and a dead retrieve_source job of it whose last error is `lastError`. */
async function deadFetchJob(t: Test, url: string, lastError: string) {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const metadata = testMetadata(repositoryId);
  const sourceId = crypto.randomUUID();
  const stream = streamName('source', sourceId);
  await handleCommand(fixture.store, stream, sourceDecider, { type: 'RegisterSource', origin: 'url', url, doi: null }, metadata);
  await handleCommand(fixture.store, stream, sourceDecider, { type: 'StartFetch' }, metadata);
  const job = {
    id: crypto.randomUUID(), kind: 'retrieve_source', repositoryId, subjectId: sourceId, sourceId, reportId: null, triggerEventId: crypto.randomUUID(), triggerPosition: 1,
    correlationId: null, state: 'dead' as const, attempts: 5, lastError, createdAt: new Date().toISOString(), updatedAt: new Date().toISOString(),
  };
  return { fixture, metadata, stream, job };
}

t.test("a source stage's dead job fails its source with the job's last error", async (t) => {
  const { fixture, metadata, stream, job } = await deadFetchJob(t, 'https://example.org/dead', 'orphaned: worker vm:1 stopped heartbeating during attempt 5');
  await failSourceOfDeadJob(fixture.store, 'retrieve_source')(job);
  const events = await fixture.store.readStream(stream);
  t.match(events.at(-1), { type: 'SourceFailed', data: { stage: 'retrieve_source', reason: /stopped heartbeating during attempt 5/ }, actor: 'system:retrieve_source' });
  await failSourceOfDeadJob(fixture.store, 'retrieve_source')({ ...job, sourceId: null });
  t.equal((await fixture.store.readStream(stream)).length, events.length, 'a job for no source records nothing');

  // The reason is kept to 2,000 characters, its start and its end: the end says what went wrong,
  // and an emoji is never halved (its half could not be stored).
  const other = crypto.randomUUID();
  await handleCommand(fixture.store, streamName('source', other), sourceDecider, { type: 'RegisterSource', origin: 'url', url: 'https://example.org/emoji', doi: null }, metadata);
  await failSourceOfDeadJob(fixture.store, 'retrieve_source')({ ...job, subjectId: other, sourceId: other, lastError: `😀 ${'x'.repeat(3000)} the page said no 😀` });
  const failed = (await fixture.store.readStream(streamName('source', other))).at(-1);
  t.match(failed, { type: 'SourceFailed', data: { reason: /^😀 x+ … \(\d+ characters left out\) … x+ the page said no 😀$/ } }, 'the start and the reason at the end');
  const reason = (failed?.data as { reason?: string } | undefined)?.reason ?? '';
  t.equal(runeLength(reason), MAX_KEPT_ERROR_CHARS, 'bounded in characters');
});

t.test("a dead job's rescue note keeps the failure of the attempt before in its source's reason", async (t) => {
  const original = `the model server answered 500: ${'😀'.repeat(5000)} out of memory`;
  const note = 'orphaned: worker vm:1:abcdef12 stopped heartbeating during attempt 5; attempt 4 failed: ';
  const { fixture, stream, job } = await deadFetchJob(t, 'https://example.org/noted', `${note}${boundedErrorMessage(original, MAX_ATTEMPT_ERROR_CHARS)}`);
  t.ok(runeLength(job.lastError) <= MAX_TASK_ERROR_CHARS, 'the note and the stored reason fit in last_error');
  await failSourceOfDeadJob(fixture.store, 'retrieve_source')(job);
  const source = foldStream(await fixture.store.readStream(stream), sourceDecider).state;
  const failure = 'failure' in source ? String(source.failure) : '';
  t.ok(failure.startsWith(`retrieve_source: ${note}the model server answered 500: 😀`), 'the note, then the start of the reason');
  t.ok(failure.endsWith('😀 out of memory'), 'and its end');
  t.equal([...failure.matchAll(/ … \((\d+) characters left out\) … /g)].length, 1, 'one marker');
});

t.test("a dead job's long last error: the source's reason counts what was left out of the original, one marker", async (t) => {
  // A failed statement's message: the whole SQL, then the reason. Its job's last_error keeps 4,000 characters of it.
  const original = `Error: insert into "facts" values ${'($1, 😀), '.repeat(1000)}- bind message has 2000 parameter formats but 0 parameters`;
  const { fixture, stream, job } = await deadFetchJob(t, 'https://example.org/long', boundedErrorMessage(original, MAX_TASK_ERROR_CHARS));
  await failSourceOfDeadJob(fixture.store, 'retrieve_source')(job);
  const source = foldStream(await fixture.store.readStream(stream), sourceDecider).state;
  t.equal(source.status, 'failed');
  const failure = 'failure' in source ? String(source.failure) : '';
  t.match(failure, /^retrieve_source: Error: insert into "facts" values \(\$1, 😀\), .* - bind message has 2000 parameter formats but 0 parameters$/u, 'the start and the reason at the end');
  const reason = failure.slice('retrieve_source: '.length);
  t.equal(runeLength(reason), MAX_KEPT_ERROR_CHARS, 'bounded in characters');
  const markers = [...reason.matchAll(/ … \((\d+) characters left out\) … /g)];
  t.equal(markers.length, 1, 'one marker, none inside another');
  const kept = runeLength(reason) - (markers[0]?.[0].length ?? 0);
  t.equal(Number(markers[0]?.[1]), runeLength(original) - kept, 'the count is of the characters left out of the original message, not of the stored last_error');
  const [head = '', tail = ''] = reason.split(markers[0]?.[0] ?? '');
  t.ok(original.startsWith(head) && original.endsWith(tail), "the original's start and end");
});
