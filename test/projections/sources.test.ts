import t from 'tap';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { sourcesProjection } from '../../projections/sources.js';
import { openScratchPostgres, type Database } from '../../src/db/database.js';
import type { NewEvent } from '../../src/eventstore/envelope.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { withServers } from '../helpers/servers.js';
import { openMemoryPglite } from '../eventstore/contract.js';

const backends: Array<{ name: string; open: () => Promise<Database> }> = [
  { name: 'pglite', open: openMemoryPglite },
  ...(withServers ? [{ name: 'postgres', open: () => openScratchPostgres(undefined, 'factlog_sources_projection') }] : []),
];

const metadata = { repositoryId: 'repo-1', actor: 'system:test', causationId: null, correlationId: null };
const registered = (data: { origin: 'url' | 'doi' | 'upload'; url?: string; doi?: string; filename?: string }): NewEvent => ({
  type: 'SourceRegistered',
  data: { url: null, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null, ...data },
  metadata,
});

/** SourceRegistered events as releases before and after the canonical spelling wrote them, with the key each source gets. */
const sources: Array<[id: string, event: NewEvent, key: string | null]> = [
  ['empty-query', registered({ origin: 'url', url: 'http://h/k02.html?' }), 'url:http://h/k02.html'],
  ['escaped', registered({ origin: 'url', url: 'http://h/%6b04.html' }), 'url:http://h/k04.html'],
  ['escape-case', registered({ origin: 'url', url: 'http://h/a%2fb?q=%c3%a9' }), 'url:http://h/a%2Fb?q=%C3%A9'],
  ['fragment', registered({ origin: 'url', url: 'http://h/page#section-2' }), 'url:http://h/page'],
  ['trailing-dot', registered({ origin: 'url', url: 'http://h.example./a' }), 'url:http://h.example/a'],
  ['canonical', registered({ origin: 'url', url: 'http://h/k05.html' }), 'url:http://h/k05.html'],
  ['doi-url', registered({ origin: 'url', url: 'https://doi.org/10.1000/QA-DOI-URL' }), 'doi:10.1000/qa-doi-url'],
  ['doi', registered({ origin: 'doi', doi: '10.1000/Mixed-Case' }), 'doi:10.1000/mixed-case'],
  ['doi-scheme', registered({ origin: 'doi', doi: 'doi:10.1000/Scheme' }), 'doi:10.1000/scheme'],
  // Refused by today's rules, kept in the log: keyed as written, without the fragment, never an error.
  ['refused-url', registered({ origin: 'url', url: 'http://user:pw@h/private#part' }), 'url:http://user:pw@h/private'],
  ['refused-doi', registered({ origin: 'doi', doi: 'Not A DOI' }), 'doi:not a doi'],
  ['upload', registered({ origin: 'upload', filename: 'notes.md' }), null],
];

for (const backend of backends) {
  t.test(`${backend.name}: each source's reference key is today's, from any release's spelling; a rebuild keys them alike`, async (t) => {
    const db = await backend.open();
    t.teardown(() => db.close());
    await migrateEventStore(db.knex);
    await migrateReadModels(db.knex);
    const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load(), pollIntervalMs: 20 });
    t.teardown(() => store.close());
    let last = 0;
    for (const [id, event] of sources) last = (await store.append(`source-${id}`, [event], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(store, db, [sourcesProjection], { batchSize: 3 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, 60_000); // on the server, other test files' transactions can hold the appends back from readers

    const keys = async () => Object.fromEntries((await db.knex('sources').orderBy('id').select('id', 'reference_key')).map((row: { id: string; reference_key: string | null }) => [row.id, row.reference_key]));
    const expected = Object.fromEntries([...sources].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, , key]) => [id, key]));
    t.same(await keys(), expected, 'live');
    t.same(
      await db.knex('sources').where({ id: 'doi-url' }).first('origin', 'url', 'doi'),
      { origin: 'url', url: 'https://doi.org/10.1000/QA-DOI-URL', doi: null },
      'the url as the event holds it; only the key is today’s',
    );

    const live = await db.knex('sources').orderBy('id').select('*');
    await db.knex('sources').update({ reference_key: 'stale' });
    await runner.rebuild('sources');
    t.same(await keys(), expected, 'rebuilt: the same keys');
    t.same(await db.knex('sources').orderBy('id').select('*'), live, 'rebuilt: the same rows');
    await runner.stop();
    const wide = new ProjectionRunner(store, db, [sourcesProjection], { batchSize: 10_000 });
    await wide.rebuild('sources');
    t.same(await keys(), expected, 'rebuilt in one batch: the same keys');
  });
}
