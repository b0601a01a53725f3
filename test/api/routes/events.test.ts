import { readFileSync } from 'node:fs';
import t from 'tap';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

interface PresentedEvent {
  event_id: string;
  stream_id: string;
  global_position: number;
  type: string;
  repository_id: string | null;
  actor: string;
  causation_id: string | null;
  correlation_id: string | null;
  occurred_at: string;
  data: Record<string, unknown>;
}
interface Page {
  events: PresentedEvent[];
  next_from: number;
}

let service: TestService;
let owner: Awaited<ReturnType<typeof registerUser>>;
let other: Awaited<ReturnType<typeof registerUser>>;
let repoId: string;
let otherRepoId: string;
let sourceId: string;
let otherInvestigationId: string;

const investigate = async (repository: string, token: string, title: string, requestId?: string) =>
  (await service.call('POST', `/api/v1/repositories/${repository}/investigations`, { token, body: { title }, headers: requestId ? { 'x-request-id': requestId } : {} })).body.id as string;

t.before(async () => {
  service = await startTestService({ workers: false });
  await registerUser(service, 'admin@example.org'); // the first user: sysadmin
  owner = await registerUser(service, 'owner@example.org');
  other = await registerUser(service, 'other@example.org');
  repoId = (await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'History' } })).body.id;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token: other.token, body: { name: 'Elsewhere' } })).body.id;
  // The two repositories' events interleave in the log.
  for (let i = 0; i < 3; i++) {
    await investigate(repoId, owner.token, `Ours ${i}`);
    otherInvestigationId = await investigate(otherRepoId, other.token, `Theirs ${i}`);
  }
  sourceId = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: owner.token, body: { url: 'http://127.0.0.1:9/history' } })).body.id;
  await service.call('POST', `/api/v1/repositories/${repoId}/reports`, { token: owner.token, body: { text: 'A sentence to annotate.' } });
});
t.teardown(() => service.close());

const eventsOf = async (query: string, token = owner.token, repository = repoId) => service.call('GET', `/api/v1/repositories/${repository}/events${query}`, { token });
const page = async (query: string): Promise<Page> => {
  const answer = await eventsOf(query);
  if (answer.status !== 200) throw new Error(`GET events${query}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body as Page;
};
/** The repository's events as the store holds them: what a replay must give. */
const stored = async (repository: string) => (await service.context.store.readAll({ repositoryId: repository, limit: 100_000 })).map((event) => event.eventId);

t.test('paging with next_from replays every event of the repository once, in order, while events are appended between pages', async (t) => {
  const seen: PresentedEvent[] = [];
  let from = 0;
  for (let round = 0; ; round++) {
    const { events, next_from } = await page(`?from=${from}&limit=2`);
    seen.push(...events);
    if (next_from === from) break; // the end: the log's head, nothing after it
    t.ok(next_from > from, 'next_from moves on');
    from = next_from;
    // Between pages, both repositories write: ours must come in a later page, theirs never.
    if (round < 4) {
      await investigate(repoId, owner.token, `Appended ${round}`);
      await investigate(otherRepoId, other.token, `Theirs appended ${round}`);
    }
  }
  const positions = seen.map((event) => event.global_position);
  t.same(positions, [...positions].sort((a, b) => a - b), 'in log order');
  t.equal(new Set(positions).size, positions.length, 'each once');
  t.same(seen.map((event) => event.event_id), await stored(repoId), 'every event of the repository, none missing');
  t.ok(seen.every((event) => event.repository_id === repoId), "no other repository's event");
  t.equal(seen.filter((event) => event.type === 'InvestigationCreated').length, 7, 'the appended ones included');
});

t.test('from: 0, the head, past the head; malformed is a 400', async (t) => {
  const head = await service.context.store.headPosition();
  const whole = await page('?from=0&limit=1000');
  t.same(whole.events.map((event) => event.event_id), await stored(repoId), 'from 0: from the start');
  t.equal(whole.next_from, head, 'a short page reads on from the head');
  t.same(await page(`?from=${head}`), { events: [], next_from: head }, 'at the head: nothing, and next_from stays');
  t.same(await page(`?from=${head + 1000}`), { events: [], next_from: head }, 'past the head: back to the head');
  const last = whole.events.at(-1);
  if (!last) throw new Error('no events');
  t.same((await page(`?from=${last.global_position - 1}`)).events.map((event) => event.event_id), [last.event_id], 'exclusive: the events after the position');
  for (const query of ['?from=abc', '?from=-1', '?from=1.5', '?from=', '?from=1e3', '?from=9007199254740992', '?limit=0', '?limit=1001']) {
    const answer = await eventsOf(query);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { error: 'bad_request', message: /from|limit/ }, query);
  }
});

t.test('types and stream filters; a filter that could match nothing is a 400 saying why', async (t) => {
  const registered = await page('?types=SourceRegistered');
  t.same(registered.events.map((event) => event.stream_id), [`source-${sourceId}`]);
  t.same(await page('?types=SourceRegistered,SourceRegistered'), registered, 'a type named twice is named once');
  const two = await page('?types=SourceRegistered,ReportCreated');
  t.same(two.events.map((event) => event.type), ['SourceRegistered', 'ReportCreated']);
  const ofSource = await page(`?stream=source-${sourceId}`);
  t.same(ofSource.events.map((event) => event.type), ['SourceRegistered'], 'one stream');
  t.same((await page(`?stream=repository-${otherRepoId}`)).events, [], "another repository's stream: nothing of it");
  t.same((await page(`?stream=investigation-${otherInvestigationId}&types=InvestigationCreated`)).events, [], 'with types too');

  const refusals: Array<[string, RegExp]> = [
    ['?types=Nope', /unknown event type Nope/],
    ['?types=SourceRegistered,Nope,Nah', /unknown event types Nope, Nah/],
    ['?types=', /types must name at least one event type/],
    ['?types=SourceRegistered,,ReportCreated', /types must be event types separated by single commas/],
    ['?types=SourceRegistered,', /types must be event types separated by single commas/],
    [`?types=${'X,'.repeat(20)}X`, /unknown event types X, X, X, X, X, X, X, X, X, X, 11 more/],
    ['?stream=', /stream/],
    ['?stream=nonsense', /stream must be <category>-<id>/],
    ['?stream=source-', /stream must be <category>-<id>/],
    [`?stream=sources-${sourceId}`, /stream must be <category>-<id>, the category one of repository, source/],
  ];
  for (const [query, message] of refusals) {
    const answer = await eventsOf(query);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { error: 'bad_request', message }, query);
  }
});

t.test("another repository's events need its events:read; role events need members:read", async (t) => {
  const refused = await eventsOf(`?stream=repository-${otherRepoId}`, owner.token, otherRepoId);
  t.equal(refused.status, 404, 'no role there: told of no repository');
  t.same(refused.body, { error: 'not_found', message: 'repository not found' });
  const granted = await page('?types=RoleGranted');
  t.same(granted.events.map((event) => event.data), [{ role: 'owner', domain: `repository:${repoId}` }], "the owner's grant, on the owner's user stream");
  await service.call('PUT', `/api/v1/repositories/${repoId}/members`, { token: owner.token, body: { user_id: other.user.id, role: 'reader' } });
  const asReader = await eventsOf('?limit=1000', other.token);
  t.equal(asReader.status, 200);
  t.notOk(asReader.body.events.some((event: PresentedEvent) => event.type === 'RoleGranted' || event.type === 'RoleRevoked'), 'a reader sees no role event');
  t.notOk(asReader.body.events.some((event: PresentedEvent) => event.repository_id !== repoId), 'nor an event of its own repository elsewhere');
  t.equal(asReader.body.next_from, (await page('?limit=1000')).next_from, 'and reads on from where the owner does');
});

t.test('each event as docs/events.md describes it: envelope, metadata and data fields', async (t) => {
  const correlation = 'history-request-1';
  const investigationId = await investigate(repoId, owner.token, 'Catalogued', correlation);
  const [created] = (await page(`?stream=investigation-${investigationId}`)).events;
  t.match(created, { type: 'InvestigationCreated', repository_id: repoId, actor: owner.user.id, correlation_id: correlation, causation_id: null, data: { title: 'Catalogued', topic: '' } });
  const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
  const all = (await page('?limit=1000')).events;
  for (const event of all) {
    t.match(event.occurred_at, rfc3339, `${event.type}: occurred_at in RFC 3339, UTC`);
    const schema = JSON.parse(readFileSync(new URL(`../../../schemas/events/${event.type}.avsc`, import.meta.url), 'utf8')) as { fields: Array<{ name: string }> };
    t.same(Object.keys(event.data).sort(), schema.fields.map((field) => field.name).sort(), `${event.type}: the data fields of its schema`);
    t.match(event.stream_id, /^(repository|source|fact|concept|report|investigation|user)-./, `${event.type}: a stream category docs/events.md names`);
  }
});
