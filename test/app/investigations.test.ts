import { randomUUID } from 'node:crypto';
import t from 'tap';
import { MAX_INVESTIGATION_SOURCES } from '../../src/domain/investigation/decider.js';
import { streamName } from '../../src/eventstore/envelope.js';
import { startTestApplication } from '../helpers/application.js';

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
