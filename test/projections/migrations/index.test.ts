import t, { type Test } from 'tap';
import { migrateReadModels, readModelMigrations } from '../../../projections/migrations/index.js';
import { sourceCommands } from '../../../src/app/sources.js';
import { conceptNameKey } from '../../../src/domain/concept/decider.js';
import { REPORT_SEARCH_VECTOR } from '../../../src/read/reports.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';
import { openMemoryPglite } from '../../eventstore/contract.js';

/**
 * A database as the release with migrations up to `last` left it: each of them applied and
 * recorded, none after. On an in-memory PGlite kept between tests (emptied when given back): the
 * migrations are the subject, not PGlite's start (about 0.5 CPU-s each, three in this file).
 */
async function migratedThrough(t: Test, last: string) {
  const db = await openMemoryPglite();
  t.teardown(() => db.close());
  const previous = readModelMigrations.findIndex((migration) => migration.id === last);
  await db.knex.raw(`CREATE TABLE schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  for (const migration of readModelMigrations.slice(0, previous + 1)) {
    await db.knex.transaction(async (trx) => {
      await migration.up(trx);
      await trx('schema_migrations').insert({ id: migration.id });
    });
  }
  return { db, after: readModelMigrations.slice(previous + 1).map((migration) => migration.id) };
}

t.test('019: the role assignments of repositories deleted before it go, the others stay', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const now = new Date();
  const repository = (id: string, deleted: boolean) => ({ id, name: id, slug: id, preset: 'default', tier: 'local', created_by: 'u1', created_at: now, updated_at: now, deleted_at: deleted ? now : null });
  await db.knex('repositories').insert([repository('gone', true), repository('live', false)]);
  await db.knex('role_assignments').insert([
    { user_id: 'u1', role: 'owner', domain: 'repository:gone', granted_at: now },
    { user_id: 'u2', role: 'reader', domain: 'repository:gone', granted_at: now },
    { user_id: 'u1', role: 'owner', domain: 'repository:live', granted_at: now },
    { user_id: 'u1', role: 'user', domain: 'system', granted_at: now },
  ]);
  await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }).delete();

  t.same(await migrateReadModels(db.knex), ['019_role_assignments_of_deleted_repositories']);
  const left = await db.knex('role_assignments').orderBy(['domain', 'user_id']).select('user_id', 'role', 'domain');
  t.same(left, [
    { user_id: 'u1', role: 'owner', domain: 'repository:live' },
    { user_id: 'u1', role: 'user', domain: 'system' },
  ]);
});

t.test('021: sources from before it get the reference key the projection gives; the lookup indexes of 015 and 017 go', async (t) => {
  // A database as the release before left it: every migration up to 020, applied and recorded.
  const { db, after } = await migratedThrough(t, '020_oauth_answered_requests');
  const now = new Date();
  const source = (id: string, origin: string, reference: { url?: string; doi?: string; filename?: string }, repository = 'repo-1') => ({
    id, repository_id: repository, origin, status: 'processed', created_by: 'u1', created_at: now, updated_at: now, ...reference,
  });
  const rows = [
    source('empty-query', 'url', { url: 'http://h/k02.html?' }),
    source('escaped', 'url', { url: 'http://h/%6b04.html' }),
    source('escape-case', 'url', { url: 'http://h/a%2fb?q=%c3%a9' }),
    source('fragment', 'url', { url: 'http://h/page#part' }),
    source('doi-url', 'url', { url: 'https://doi.org/10.1000/QA-DOI-URL' }),
    source('doi', 'doi', { doi: '10.1000/Mixed' }, 'repo-2'),
    source('refused', 'url', { url: 'ftp://h/file#x' }),
    source('upload', 'upload', { filename: 'notes.md' }),
  ];
  // More than one of the migration's pages.
  for (let i = 0; i < 1100; i += 1) rows.push(source(`many-${String(i).padStart(4, '0')}`, 'url', { url: `http://h/%6bmany/${i}?` }));
  for (let i = 0; i < rows.length; i += 500) await db.knex('sources').insert(rows.slice(i, i + 500));

  t.same(await migrateReadModels(db.knex), after, 'the migrations after 020 run');
  const keys = new Map((await db.knex('sources').select('id', 'reference_key')).map((row: { id: string; reference_key: string | null }) => [row.id, row.reference_key]));
  t.same(
    Object.fromEntries(['empty-query', 'escaped', 'escape-case', 'fragment', 'doi-url', 'doi', 'refused', 'upload'].map((id) => [id, keys.get(id)])),
    {
      'empty-query': 'url:http://h/k02.html',
      escaped: 'url:http://h/k04.html',
      'escape-case': 'url:http://h/a%2Fb?q=%C3%A9',
      fragment: 'url:http://h/page',
      'doi-url': 'doi:10.1000/qa-doi-url',
      doi: 'doi:10.1000/mixed',
      refused: 'url:ftp://h/file',
      upload: null,
    },
  );
  t.equal(keys.get('many-1099'), 'url:http://h/kmany/1099', 'every page of rows keyed');
  t.equal([...keys.values()].filter((key) => key === null).length, 1, 'only the upload has no key');
  const indexes = await db.knex('pg_indexes').where({ tablename: 'sources' }).orderBy('indexname').pluck('indexname');
  t.same(indexes, ['sources_pkey', 'sources_reference_key', 'sources_repository'], 'the key indexed; the url and doi expressions of 015 and 017 dropped');
});

t.test('022: URLs keyed with lower-case escapes are keyed again in upper case; two sources that now share a key stay two, the older one found', async (t) => {
  // A database as the release before 022 left it: its keys kept the escapes' case as added.
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const at = (minute: number) => new Date(Date.UTC(2026, 10, 1, 0, minute));
  const source = (id: string, reference: { url?: string; doi?: string }, reference_key: string | null, created_at = at(0), repository = 'repo-1') => ({
    id, repository_id: repository, origin: reference.doi ? 'doi' : 'url', status: 'processed', created_by: 'u1', created_at, updated_at: created_at, reference_key, ...reference,
  });
  const rows = [
    source('lower', { url: 'http://h/a%2fb?q=%c3%a9' }, 'url:http://h/a%2fb?q=%c3%a9'),
    source('mixed', { url: 'http://h/%2F%2f' }, 'url:http://h/%2F%2f'),
    source('upper', { url: 'http://h/c%2Fd' }, 'url:http://h/c%2Fd'),
    source('plain', { url: 'http://h/plain' }, 'url:http://h/plain'),
    // Both spellings added before: one key now.
    source('both-older', { url: 'http://h/both%2F' }, 'url:http://h/both%2F', at(1), 'repo-2'),
    source('both-newer', { url: 'http://h/both%2f' }, 'url:http://h/both%2f', at(2), 'repo-2'),
    source('doi-url', { url: 'https://doi.org/10.1000%2fX' }, 'doi:10.1000/x'),
    source('doi', { doi: '10.1000/A%2fB' }, 'doi:10.1000/a%2fb'),
    source('refused', { url: 'ftp://h/a%2f' }, 'url:ftp://h/a%2f'),
  ];
  // More than one of the migration's pages.
  for (let i = 0; i < 1100; i += 1) rows.push(source(`many-${String(i).padStart(4, '0')}`, { url: `http://h/many%2f${i}` }, `url:http://h/many%2f${i}`));
  for (let i = 0; i < rows.length; i += 500) await db.knex('sources').insert(rows.slice(i, i + 500));
  await db.knex('schema_migrations').where({ id: '022_sources_reference_key_escapes' }).delete();
  const before = await db.knex('sources').orderBy('id').select('id', 'url', 'doi', 'created_at', 'updated_at');

  t.same(await migrateReadModels(db.knex), ['022_sources_reference_key_escapes']);
  const keys = new Map((await db.knex('sources').select('id', 'reference_key')).map((row: { id: string; reference_key: string | null }) => [row.id, row.reference_key]));
  t.same(Object.fromEntries(rows.slice(0, 9).map((row) => [row.id, keys.get(row.id)])), {
    lower: 'url:http://h/a%2Fb?q=%C3%A9',
    mixed: 'url:http://h/%2F%2F',
    upper: 'url:http://h/c%2Fd',
    plain: 'url:http://h/plain',
    'both-older': 'url:http://h/both%2F',
    'both-newer': 'url:http://h/both%2F',
    'doi-url': 'doi:10.1000/x',
    doi: 'doi:10.1000/a%2fb',
    refused: 'url:ftp://h/a%2f',
  });
  t.equal(keys.get('many-1099'), 'url:http://h/many%2F1099', 'every page of rows keyed');
  t.same(await db.knex('sources').orderBy('id').select('id', 'url', 'doi', 'created_at', 'updated_at'), before, 'only the keys change: url and doi as the events wrote them');

  // The command side's lookup, on the migrated rows.
  const sources = sourceCommands({ db } as unknown as Parameters<typeof sourceCommands>[0]);
  t.equal((await sources.find('repo-1', { url: 'http://h/a%2Fb?q=%C3%A9' }))?.id, 'lower', 'the other spelling finds the source stored in lower case');
  t.equal((await sources.find('repo-1', { url: 'http://h/a%2fb?q=%c3%a9' }))?.id, 'lower', 'and its own spelling still does');
  t.equal((await sources.find('repo-2', { url: 'http://h/both%2f' }))?.id, 'both-older', 'of two sources of one key, the older is answered');
  t.equal((await sources.find('repo-2', { url: 'http://h/both/' })), null, 'an unescaped slash is another address');
});

t.test('023: alias rows spelt decomposed are spelt and keyed composed; two of one concept that now share a key are one', async (t) => {
  // A database as the release before 023 left it: alias rows spelt and keyed as the events wrote them.
  const { db, after } = await migratedThrough(t, '022_sources_reference_key_escapes');
  const now = new Date();
  const concept = (id: string, canonical_name: string) => ({ id, repository_id: 'repo-1', canonical_name, context: 'place', status: 'active', created_at: now, updated_at: now });
  const alias = (concept_id: string, name: string) => ({ concept_id, repository_id: 'repo-1', alias: name, alias_lower: name.toLowerCase(), context_lower: 'place' });
  const cafeNfd = 'Cafe\u0301 de Flore';
  await db.knex('concepts').insert([concept('c1', cafeNfd), concept('c2', 'Zürich'), concept('c3', 'Plain')]);
  await db.knex('concept_aliases').insert([
    alias('c1', cafeNfd),
    alias('c1', 'Le Cafe\u0301'),
    alias('c1', 'Flore'),
    // Both spellings of one alias: one row of the composed key after, the composed one.
    alias('c2', 'Zürich'),
    alias('c2', 'Zu\u0308rich'),
    alias('c3', 'Plain'),
  ]);
  // More than one of the migration's pages: concepts with non-ASCII aliases, which it pages
  // through. Every hundredth decomposed, the last (m-1099, on the second page) among them; the
  // others composed already, which it reads and leaves (rewriting 1,100 rows one by one was
  // 2,200 statements, most of the file's CPU).
  const many = Array.from({ length: 1100 }, (_, i) => `m-${String(i).padStart(4, '0')}`);
  const spelt = (id: string) => (Number(id.slice(2)) % 100 === 99 ? `${id} e\u0301` : `${id} \u00e9`);
  for (let i = 0; i < many.length; i += 500) {
    await db.knex('concepts').insert(many.slice(i, i + 500).map((id) => concept(id, `${id} e\u0301`)));
    await db.knex('concept_aliases').insert(many.slice(i, i + 500).map((id) => alias(id, spelt(id))));
  }

  t.same(await migrateReadModels(db.knex), after);
  t.equal(after[0], '023_concept_aliases_nfc');
  const rows = await db.knex('concept_aliases').whereIn('concept_id', ['c1', 'c2', 'c3']).orderBy(['concept_id', 'alias_lower']).select('concept_id', 'alias', 'alias_lower');
  t.same(rows, [
    { concept_id: 'c1', alias: 'Café de Flore', alias_lower: 'café de flore' },
    { concept_id: 'c1', alias: 'Flore', alias_lower: 'flore' },
    { concept_id: 'c1', alias: 'Le Café', alias_lower: 'le café' },
    { concept_id: 'c2', alias: 'Zürich', alias_lower: 'zürich' },
    { concept_id: 'c3', alias: 'Plain', alias_lower: 'plain' },
  ]);
  t.equal((await db.knex('concept_aliases').where({ concept_id: 'm-1099' }).first('alias_lower'))?.alias_lower, 'm-1099 é', 'every page of rows keyed');
  t.same(
    await db.knex('concept_aliases').where('concept_id', 'like', 'm-%').whereRaw('alias <> normalize(alias, NFC)').pluck('concept_id'),
    [],
    'every page of rows spelt composed',
  );
  const c1 = await db.knex('concepts').where({ id: 'c1' }).first('canonical_name', 'alias_text');
  t.equal(c1?.canonical_name, cafeNfd, 'the canonical name stays as its event recorded it');
  t.equal(c1?.alias_text, 'Flore Le Café', 'the alias text is made again from the rows (by 024), without the canonical name');
});

t.test('024: every concept gets its canonical name\'s key from TypeScript, its alias text made by that key; the name index is not unique', async (t) => {
  const { db, after } = await migratedThrough(t, '023_concept_aliases_nfc');
  t.equal(after[0], '024_concepts_name_key');
  const now = new Date();
  const concept = (id: string, canonical_name: string, alias_text: string) => ({ id, repository_id: 'repo-1', canonical_name, context: 'person', status: 'active', alias_text, created_at: now, updated_at: now });
  const alias = (concept_id: string, name: string) => ({ concept_id, repository_id: 'repo-1', alias: name.normalize('NFC'), alias_lower: conceptNameKey(name), context_lower: 'person' });
  // As the projection wrote them before 024: the alias text left out only the row SQL lower() matched.
  const named: Array<[string, string, string[]]> = [
    ['zola', 'Émile Zola', ['Zola']],
    ['decomposed', 'E\u0301mile Zola', ['Zola']],
    ['sigma', 'ΟΔΟΣ', []],
    ['ascii', 'Marie Curie', ['Curie']],
  ];
  await db.knex('concepts').insert(named.map(([id, name, aliases]) => concept(id, name, [name, ...aliases].join(' '))));
  await db.knex('concept_aliases').insert(named.flatMap(([id, name, aliases]) => [name, ...aliases].map((a) => alias(id, a))));
  // More than one of the migration's pages.
  const many = Array.from({ length: 1100 }, (_, i) => `m-${String(i).padStart(4, '0')}`);
  for (let i = 0; i < many.length; i += 500) await db.knex('concepts').insert(many.slice(i, i + 500).map((id) => concept(id, `${id.toUpperCase()} E\u0301`, '')));

  t.same(await migrateReadModels(db.knex), after);
  const rows = await db.knex('concepts').whereIn('id', named.map(([id]) => id)).orderBy('id').select('id', 'canonical_name', 'name_key', 'alias_text');
  t.same(rows, [
    { id: 'ascii', canonical_name: 'Marie Curie', name_key: 'marie curie', alias_text: 'Curie' },
    { id: 'decomposed', canonical_name: 'E\u0301mile Zola', name_key: 'émile zola', alias_text: 'Zola' },
    { id: 'sigma', canonical_name: 'ΟΔΟΣ', name_key: 'οδος', alias_text: '' },
    { id: 'zola', canonical_name: 'Émile Zola', name_key: 'émile zola', alias_text: 'Zola' },
  ], 'keyed as conceptNameKey keys them; the canonical name is no longer listed among its aliases');
  t.equal((await db.knex('concepts').where({ id: 'm-1099' }).first('name_key'))?.name_key, 'm-1099 é', 'every page of concepts keyed');
  const indexes = await db.knex('pg_indexes').where({ tablename: 'concepts' }).pluck('indexname');
  t.notOk(indexes.includes('concepts_identity'), 'the unique index on lower() is gone');
  t.ok(indexes.includes('concepts_name_key'), 'names are looked up by their key');
  await t.rejects(db.knex('concepts').insert({ ...concept('no-key', 'X', ''), name_key: null }), /null value in column "name_key"/, 'every row has a key');
});

t.test('025: a report annotated at its revision says so; one changed since its annotation says nothing it cannot know', async (t) => {
  const { db, after } = await migratedThrough(t, '024_concepts_name_key');
  t.equal(after[0], '025_reports_annotated_revision');
  const now = new Date();
  const report = (id: string, status: string, revision: number) => ({ id, repository_id: 'repo-1', title: id, text: 'Some text.', origin: 'text', status, revision, created_by: 'u1', created_at: now, updated_at: now, annotated_at: now });
  await db.knex('reports').insert([report('current', 'annotated', 3), report('edited', 'pending', 2), report('failed', 'failed', 4)]);
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('reports').orderBy('id').select('id', 'annotated_revision'), [
    { id: 'current', annotated_revision: 3 },
    { id: 'edited', annotated_revision: null },
    { id: 'failed', annotated_revision: null },
  ]);
});

t.test('026: facts an earlier deletion left without a source are unsourced (hidden until retracted); the others are not', async (t) => {
  const { db, after } = await migratedThrough(t, '025_reports_annotated_revision');
  t.equal(after[0], '026_facts_unsourced');
  const now = new Date();
  const fact = (id: string, status: string) => ({ id, repository_id: 'repo-1', content: id, content_hash: id, status, created_at: now });
  await db.knex('facts').insert([fact('sourced', 'stable'), fact('orphan', 'new'), fact('merged', 'merged')]);
  await db.knex('fact_sources').insert({ fact_id: 'sourced', source_id: 's1', repository_id: 'repo-1', chunk_index: 0 });
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('facts').orderBy('id').select('id', 'unsourced'), [
    { id: 'merged', unsourced: false },
    { id: 'orphan', unsourced: true },
    { id: 'sourced', unsourced: false },
  ], 'a merged fact is hidden already');
  t.ok((await db.knex('pg_indexes').where({ tablename: 'facts' }).pluck('indexname')).includes('facts_unsourced'));
});

t.test('027: summary slices and reports written before it are searched without their citations', async (t) => {
  const { db, after } = await migratedThrough(t, '026_facts_unsourced');
  t.equal(after[0], '027_search_without_citations');
  const now = new Date();
  const id = 'c0ffee00-1111-4222-8333-444455556666';
  const text = `Crumbs fall from crusts (fact:${id}) and [loaves](<fact:${id}>).`;
  await db.knex('concept_summaries').insert({
    id: 's1', repository_id: 'repo-1', concept_id: 'c1', slice_number: 0, is_open: true, status: 'open', content: text,
    fact_ids: JSON.stringify([id]), fact_count: 1, model_id: 'local', reason: 'facts_added', created_at: now, updated_at: now,
  });
  await db.knex('reports').insert({ id: 'r1', repository_id: 'repo-1', title: 'Crumbs', text, origin: 'text', status: 'pending', revision: 1, created_by: 'u1', created_at: now, updated_at: now });
  // Reports are searched by the expression of their index: before, the one migration 006 made.
  const matching = async (query: string, reportVector = REPORT_SEARCH_VECTOR) => ({
    slices: (await db.knex('concept_summaries').whereRaw(`search @@ websearch_to_tsquery('english', ?)`, [query]).pluck('id')) as string[],
    reports: (await db.knex('reports').whereRaw(`${reportVector} @@ websearch_to_tsquery('english', ?)`, [query]).pluck('id')) as string[],
  });
  t.same(await matching('fact', `to_tsvector('english', title || ' ' || text)`), { slices: ['s1'], reports: ['r1'] }, 'before: the bare citation is words');
  t.same(await migrateReadModels(db.knex), after);
  t.same(await matching('fact'), { slices: [], reports: [] }, 'after: neither "fact"');
  t.same(await matching('c0ffee00'), { slices: [], reports: [] }, 'nor a piece of the id matches');
  t.same(await matching('crusts'), { slices: ['s1'], reports: ['r1'] }, 'the prose does');
  t.ok((await db.knex('pg_indexes').whereIn('indexname', ['concept_summaries_search', 'reports_search']).pluck('indexname')).length === 2, 'both indexes are there');
});

t.test('030: alias rows and concepts whose names hold compatibility forms are keyed folded (NFKC); the others are left as they are', async (t) => {
  const { db, after } = await migratedThrough(t, '029_source_references_pending');
  t.equal(after[0], '030_concept_names_nfkc');
  const now = new Date();
  // As the release before 030 keyed them: lower case, composed (NFC), compatibility forms kept.
  const nfcKey = (name: string) => name.normalize('NFC').toLowerCase().normalize('NFC');
  const concept = (id: string, canonical_name: string, aliases: string[]) => ({
    id, repository_id: 'repo-1', canonical_name, name_key: nfcKey(canonical_name), context: 'field', status: 'active', alias_text: aliases.join(' '), created_at: now, updated_at: now,
  });
  const alias = (concept_id: string, name: string) => ({ concept_id, repository_id: 'repo-1', alias: name, alias_lower: nfcKey(name), context_lower: 'field' });
  await db.knex('concepts').insert([concept('wide', 'ＡＩ', ['Artiﬁcial Intelligence']), concept('plain', 'Café', ['Cafe']), concept('water', 'Water', ['H₂O'])]);
  await db.knex('concept_aliases').insert([
    alias('wide', 'ＡＩ'),
    alias('wide', 'Artiﬁcial Intelligence'),
    // Two spellings of one alias that meet on the folded key: one row after, the first kept.
    alias('wide', 'ai'),
    alias('plain', 'Café'),
    alias('plain', 'Cafe'),
    alias('water', 'Water'),
    alias('water', 'H₂O'),
  ]);
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('concept_aliases').orderBy(['concept_id', 'alias_lower']).select('concept_id', 'alias', 'alias_lower'), [
    { concept_id: 'plain', alias: 'Cafe', alias_lower: 'cafe' },
    { concept_id: 'plain', alias: 'Café', alias_lower: 'café' },
    { concept_id: 'water', alias: 'H₂O', alias_lower: 'h2o' },
    { concept_id: 'water', alias: 'Water', alias_lower: 'water' },
    { concept_id: 'wide', alias: 'ai', alias_lower: 'ai' },
    { concept_id: 'wide', alias: 'Artiﬁcial Intelligence', alias_lower: 'artificial intelligence' },
  ]);
  t.same(await db.knex('concepts').orderBy('id').select('id', 'canonical_name', 'name_key', 'alias_text'), [
    { id: 'plain', canonical_name: 'Café', name_key: 'café', alias_text: 'Cafe' },
    { id: 'water', canonical_name: 'Water', name_key: 'water', alias_text: 'H₂O' },
    { id: 'wide', canonical_name: 'ＡＩ', name_key: 'ai', alias_text: 'Artiﬁcial Intelligence' },
  ], 'the name kept as written, its key folded, its alias text made by that key');
});

t.test("031: the source adds' marks move to the locks' table under their lock's name, and their table goes", async (t) => {
  const { db, after } = await migratedThrough(t, '030_concept_names_nfkc');
  t.equal(after[0], '031_lock_pending_positions');
  const created_at = new Date('2026-12-01T20:00:00Z');
  await db.knex('source_references_pending').insert([
    { repository_id: 'repo-1', reference_key: 'url:http://example.org/a', source_id: 's1', position: 41, created_at },
    { repository_id: 'repo-2', reference_key: 'doi:10.1/x', source_id: 's2', position: 42, created_at },
  ]);
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('lock_pending_positions').orderBy('lock_name').select('lock_name', 'projection', 'position'), [
    { lock_name: 'factlog.source-reference.repo-1.url:http://example.org/a', projection: 'sources', position: '41' },
    { lock_name: 'factlog.source-reference.repo-2.doi:10.1/x', projection: 'sources', position: '42' },
  ]);
  t.equal(await db.knex.schema.hasTable('source_references_pending'), false, 'the old table is gone');
});

t.test("032: a lock's marks are kept per stream; those from before it have the stream '' (not known)", async (t) => {
  const { db, after } = await migratedThrough(t, '031_lock_pending_positions');
  t.equal(after[0], '032_lock_pending_positions_stream');
  const created_at = new Date('2026-12-02T01:00:00Z');
  await db.knex('lock_pending_positions').insert({ lock_name: 'factlog.members.repo-1', projection: 'users', position: 41, created_at });
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('lock_pending_positions').select('lock_name', 'projection', 'stream_id', 'position'), [
    { lock_name: 'factlog.members.repo-1', projection: 'users', stream_id: '', position: '41' },
  ]);
  await db.knex('lock_pending_positions').insert([
    { lock_name: 'factlog.members.repo-1', projection: 'users', stream_id: 'user-a', position: 42, created_at },
    { lock_name: 'factlog.members.repo-1', projection: 'users', stream_id: 'user-b', position: 43, created_at },
  ]);
  await t.rejects(
    db.knex('lock_pending_positions').insert({ lock_name: 'factlog.members.repo-1', projection: 'users', stream_id: 'user-a', position: 44, created_at }),
    /duplicate key/,
    'one row per lock, projection and stream',
  );
});

t.test('a database a newer factlog migrated is refused before any migration runs, naming the unknown ids', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }).delete();
  await db.knex('schema_migrations').insert([{ id: '999_from_the_future' }, { id: '998_also_newer' }]);

  await t.rejects(migrateReadModels(db.knex), {
    name: 'NewerSchemaError',
    message: /^the database was migrated by a newer factlog: it holds migrations 998_also_newer, 999_from_the_future, which this version does not know/,
  });
  t.same(await db.knex('schema_migrations').where({ id: '019_role_assignments_of_deleted_repositories' }), [], 'the missing known migration was not run');
});

t.test('033: the checkpoints of a runner that ran before it get rebuild_target, NULL (no rebuild under way); a database it never ran on is left to the runner', async (t) => {
  const { db, after } = await migratedThrough(t, '032_lock_pending_positions_stream');
  t.equal(after[0], '033_projection_checkpoints_rebuild_target');
  // The table as the runner made it before 033.
  await db.knex.raw(`CREATE TABLE projection_checkpoints (name text PRIMARY KEY, position bigint NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL DEFAULT now())`);
  await db.knex('projection_checkpoints').insert({ name: 'facts', position: 12 });
  t.same(await migrateReadModels(db.knex), after);
  t.same(await db.knex('projection_checkpoints').select('name', 'position', 'rebuild_target'), [{ name: 'facts', position: '12', rebuild_target: null }]);

  const fresh = await migratedThrough(t, '032_lock_pending_positions_stream');
  t.same(await migrateReadModels(fresh.db.knex), fresh.after);
  t.equal(await fresh.db.knex.schema.hasTable('projection_checkpoints'), false, 'no table before the runner makes it (with the column)');
});
