import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { buildConfig } from '../../src/config/load.js';
import { parseDuration } from '../../src/config/duration.js';
import { QUEUED_JOB_KINDS, UNBUILT_JOB_KINDS, type Config } from '../../src/config/types.js';
import { createLocalEmbedder } from '../../src/providers/embeddings/local.js';
import { createLocalChatModel } from '../../src/providers/llm/local.js';
import { createPipelineStages, stageRegistry } from '../../src/pipeline/registry.js';
import { inThreadDocumentExtractor } from '../../src/providers/fetch/extractionWorkers.js';
import { namedLocks } from '../../src/db/namedLock.js';
import type { StageDefinition, StageDeps } from '../../src/pipeline/types.js';
import { createFileAssetStore } from '../../src/storage/assets.js';
import { openStageFixture } from './stageFixture.js';

// The kinds the tasks filters refuse are exactly those without a stage.
const NOT_YET_BUILT = [...UNBUILT_JOB_KINDS];

// One in-memory PGlite for the file: creating stages reads and writes nothing.
const fixture = openStageFixture(t);
const assetsDir = mkdtemp(path.join(tmpdir(), 'factlog-registry-'));
t.teardown(async () => rm(await assetsDir, { recursive: true, force: true }));

/** The deps the composition root passes, over a real in-memory PGlite. */
async function depsFor(config: Config): Promise<StageDeps> {
  const { store, db, search } = await fixture;
  return {
    config,
    store,
    knex: db.knex,
    locks: namedLocks(db),
    assets: createFileAssetStore(await assetsDir),
    search,
    // The in-thread built-in models: creating stages calls no model, so no worker threads are needed.
    chat: createLocalChatModel(),
    embedder: config.providers.embeddings.provider === 'none' ? null : createLocalEmbedder(),
    documents: inThreadDocumentExtractor,
  };
}

/** The registry with every create() call counted by kind. */
function counting(registry: readonly StageDefinition[]): { registry: StageDefinition[]; created: Map<string, number> } {
  const created = new Map<string, number>();
  return {
    created,
    registry: registry.map((definition) => ({
      ...definition,
      create(deps: StageDeps) {
        created.set(definition.kind, (created.get(definition.kind) ?? 0) + 1);
        return definition.create(deps);
      },
    })),
  };
}

t.test('defaults: every enabled stage is created once, refinement is not, periodic jobs follow the config', async (t) => {
  const config = buildConfig({});
  const { registry, created } = counting(stageRegistry);
  const { stages, periodic, kindsWithoutStage } = createPipelineStages(config, await depsFor(config), registry);
  const expected = [
    'retrieve_source',
    'source_decomposition',
    'embed_facts',
    'deduplicate_facts',
    'cleanup_facts',
    'extract_concepts',
    'embed_concepts',
    'migrate_context',
    'refresh_concept_relations',
    'annotate_report',
    'summarize_concepts',
    'synthesize_concept',
  ];
  t.same(stages.map((stage) => stage.kind), expected, 'in registry order');
  t.same(Object.fromEntries(created), Object.fromEntries(expected.map((kind) => [kind, 1])), 'each created once; refine_concepts never');
  t.same(
    periodic,
    [
      { kind: 'deduplicate_facts', intervalMs: parseDuration(config.providers.dedup.catchup_interval) },
      { kind: 'refresh_concept_relations', intervalMs: parseDuration(config.task.refresh_concept_relations_interval) },
      // The safety net of summaries whose trigger ran before the read models had its links.
      { kind: 'summarize_concepts', intervalMs: parseDuration(config.task.refresh_concept_relations_interval) },
    ],
  );
  t.same(kindsWithoutStage, NOT_YET_BUILT, 'spec kinds without a stage are reported');
  t.same(stages.find((stage) => stage.kind === 'deduplicate_facts')?.triggers, ['FactsEmbedded'], 'dedup follows the embedder');
});

t.test('summarization and synthesis follow their enabled settings', async (t) => {
  const config = buildConfig({ providers: { summarization: { enabled: false }, synthesis: { enabled: false } } });
  const { stages, periodic } = createPipelineStages(config, await depsFor(config), stageRegistry);
  t.notOk(stages.some((stage) => stage.kind === 'summarize_concepts' || stage.kind === 'synthesize_concept'));
  t.notOk(periodic.some((job) => job.kind === 'summarize_concepts'));
});

t.test('without embeddings and with refinement: the embedding stages are not created, refinement is', async (t) => {
  const config = buildConfig({ providers: { embeddings: { provider: 'none' }, refinement: { enabled: true } } });
  const { registry, created } = counting(stageRegistry);
  const { stages, periodic } = createPipelineStages(config, await depsFor(config), registry);
  const kinds = stages.map((stage) => stage.kind);
  t.notOk(kinds.includes('embed_facts') || kinds.includes('embed_concepts'), 'no stage that needs vectors');
  t.notOk(created.has('embed_facts') || created.has('embed_concepts'), 'their create() was never called');
  t.equal(created.get('refine_concepts'), 1);
  t.same(stages.find((stage) => stage.kind === 'deduplicate_facts')?.triggers, ['FactsExtracted'], 'dedup follows decomposition directly');
  t.same(
    periodic.map((job) => job.kind),
    ['refine_concepts', 'refresh_concept_relations', 'summarize_concepts'],
    'no catch-up deduplication without vectors',
  );
});

t.test('a stage that needs an embedder refuses to be created without one', async (t) => {
  const config = buildConfig({ providers: { embeddings: { provider: 'none' } } });
  const deps = await depsFor(config);
  const embedFacts = stageRegistry.find((definition) => definition.kind === 'embed_facts');
  t.ok(embedFacts);
  t.throws(() => embedFacts?.create(deps), /embed_facts needs an embedder/);
});

t.test('bad registries are refused before any stage is created', async (t) => {
  const config = buildConfig({});
  const deps = await depsFor(config);
  const [first] = stageRegistry;
  const { registry, created } = counting([first, first]);
  t.throws(() => createPipelineStages(config, deps, registry), /retrieve_source is registered twice/);
  t.equal(created.size, 0, 'nothing created');

  // A kind outside the spec's list has no worker count in task.queues; plain JavaScript (or a cast) can still name one.
  const unknown = { ...first, kind: 'summarise_everything' } as unknown as StageDefinition;
  t.throws(() => createPipelineStages(config, deps, [unknown]), /summarise_everything is not a job kind of the spec/);

  const mislabelled: StageDefinition = { ...first, kind: 'cleanup_facts' };
  t.throws(() => createPipelineStages(config, deps, [mislabelled]), /definition of cleanup_facts created a stage of kind retrieve_source/);
});

t.test('the registry covers the spec list: each kind at most once, the rest reported as not built', async (t) => {
  const kinds = stageRegistry.map((definition) => definition.kind);
  t.equal(new Set(kinds).size, kinds.length, 'no kind twice');
  t.same([...kinds, ...NOT_YET_BUILT].sort(), [...QUEUED_JOB_KINDS].sort(), 'registered and not-yet-built kinds make up the spec list');
});

t.test("docs/pipeline.md's stage table has a row for every registered stage and no other", async (t) => {
  const text = await readFile(new URL('../../docs/pipeline.md', import.meta.url), 'utf8');
  const section = text.slice(text.indexOf('\n## Stages\n'), text.indexOf('\n## ', text.indexOf('\n## Stages\n') + 1));
  const documented = [...section.matchAll(/^\| ([a-z_]+) \|/gm)].map((match) => match[1]);
  t.same(documented.sort(), stageRegistry.map((definition) => definition.kind).sort());
});

t.test('docs/architecture.md\'s "Adding a stage" shows the registry and the summarize_concepts definition as they are', async (t) => {
  const text = await readFile(new URL('../../docs/architecture.md', import.meta.url), 'utf8');
  const section = text.slice(text.indexOf('\n## Adding a stage\n'), text.indexOf('\n## ', text.indexOf('\n## Adding a stage\n') + 1));
  const stageFile = await readFile(new URL('../../src/pipeline/stages/summarizeConcepts.ts', import.meta.url), 'utf8');
  const definition = /\/\*\* The registry's entry[^\n]*\nexport const summarizeConceptsStage: StageDefinition = \{\n[\s\S]*?\n\};\n/.exec(section)?.[0];
  t.ok(definition, 'the docs show the definition');
  t.ok(definition !== undefined && stageFile.includes(definition), 'word for word as in summarizeConcepts.ts');
  // The registry's last lines, after the docs' `...`: the lines the example adds its stage among.
  const shown = /export const stageRegistry: readonly StageDefinition\[\] = \[\n {2}\.\.\.\n((?: {2}\w+,\n)+)\];/.exec(section)?.[1].trim().split(/,\s*/).filter(Boolean);
  const registered = stageRegistry.map((entry) => `${entry.kind.replace(/_(\w)/g, (_, letter: string) => letter.toUpperCase())}Stage`);
  t.same(shown, registered.slice(-(shown?.length ?? 0)), 'the registry ends with the lines the docs show');
});
