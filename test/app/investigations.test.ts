import { randomUUID } from 'node:crypto';
import t from 'tap';
import { MAX_INVESTIGATION_SOURCES } from '../../src/domain/investigation/decider.js';
import { streamName } from '../../src/eventstore/envelope.js';
import { createApplication } from '../../src/app/application.js';
import { startTestApplication } from '../helpers/application.js';
import { racingCommandBus } from '../helpers/racedWrites.js';

t.test('a URL refused by a full investigation is not registered in the repository either', async (t) => {
  const harness = await startTestApplication({ name: 'Full' });
  t.teardown(() => harness.close());
  const { app, owner, repository, service } = harness;
  const investigation = await app.investigations.create(owner, { repository, title: 'Everything' });
  // As many live sources as an investigation gathers, registered and linked in two appends.
  const metadata = { repositoryId: repository, actor: 'system:test', causationId: null, correlationId: null };
  const sourceIds = Array.from({ length: MAX_INVESTIGATION_SOURCES }, () => randomUUID());
  await service.context.store.appendToStreams(
    sourceIds.map((id, i) => ({
      streamId: streamName('source', id),
      events: [{ type: 'SourceRegistered', data: { origin: 'url', url: `https://example.org/page-${i}`, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null }, metadata }],
      expected: 'no_stream' as const,
    })),
  );
  const linked = await service.context.store.append(
    streamName('investigation', investigation.id),
    sourceIds.map((id) => ({ type: 'InvestigationSourceAdded', data: { source_id: id }, metadata })),
    'any',
  );
  await service.context.commands.settle({ position: linked.lastPosition, streamId: streamName('investigation', investigation.id), streamVersion: linked.nextExpectedVersion, types: ['InvestigationSourceAdded'] });
  t.equal((await app.investigations.get(owner, { repository, investigation: investigation.id })).source_count, MAX_INVESTIGATION_SOURCES);

  const before = (await app.sources.list(owner, { repository })).total;
  await t.rejects(app.investigations.addSource(owner, { repository, investigation: investigation.id, url: 'https://example.org/one-more' }), { code: 'invalid', message: /at most 1000 sources/ });
  t.equal((await app.sources.list(owner, { repository })).total, before, 'no source registered for it');
});

t.test('an edit whose write lands before a deletion answers the edit, not 404; the deletion then lands', async (t) => {
  const harness = await startTestApplication({ name: 'Edited' });
  t.teardown(() => harness.close());
  const { owner, repository, service } = harness;
  const investigation = await harness.app.investigations.create(owner, { repository, title: 'Before' });
  const { commands } = service.context;
  const racing = racingCommandBus(commands, 'InvestigationUpdated', () => app.investigations.remove(owner, { repository, investigation: investigation.id }));
  const app = createApplication({ ...service.context, commands: racing.bus });
  const edited = await app.investigations.update(owner, { repository, investigation: investigation.id, title: 'After' }).catch((error: unknown) => error);
  t.match(edited, { id: investigation.id, title: 'After' }, 'the edit was stored before the deletion: it is answered');
  t.equal(await racing.raced(), undefined, 'the deletion then succeeds');
  await t.rejects(harness.app.investigations.get(owner, { repository, investigation: investigation.id }), { name: 'DomainError', message: /deleted|not found/ }, 'deleted');
});
