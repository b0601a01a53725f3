import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { Client as OpenSearchClient } from '@opensearch-project/opensearch';
import t from 'tap';
import { buildConfig, trustConfiguredCertificates } from '../../src/config/index.js';
import { createOpenAIEmbedder } from '../../src/providers/embeddings/openai.js';
import { addressPolicyFromConfig } from '../../src/providers/fetch/addressPolicy.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS } from '../../src/providers/fetch/http.js';
import { certificateAuthority, hasOpenssl } from '../helpers/certificates.js';
import { configErrorOf, load } from './helpers.js';

const execFileAsync = promisify(execFile);
const skip = hasOpenssl() ? false : 'no openssl CLI to make the certificates';

t.test('tls.ca_file must be a readable file of PEM certificates, named with its source when not', { skip }, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'factlog-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const authority = certificateAuthority(dir, 'Factlog test CA', 'localhost');
  writeFileSync(path.join(dir, 'notes.txt'), 'no certificate here\n');
  writeFileSync(path.join(dir, 'broken.pem'), `${authority.ca}-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n`);

  t.equal(load().tls.ca_file, '', 'none by default');
  t.equal(load({ env: { TLS_CA_FILE: authority.caFile } }).tls.ca_file, authority.caFile, 'a CA file passes');
  const cwd = t.testdir({ 'config.yaml': `tls:\n  ca_file: ${path.relative(t.testdirName, authority.caFile)}\n` });
  t.equal(load({ cwd, configPath: 'config.yaml' }).tls.ca_file, path.relative(cwd, authority.caFile), 'a relative path is read from the working directory');

  const missing = path.join(dir, 'missing.pem');
  t.match(
    configErrorOf(() => load({ env: { TLS_CA_FILE: missing } })),
    `tls.ca_file: cannot read ${missing}: no such file (set by environment variable TLS_CA_FILE)`,
  );
  t.match(configErrorOf(() => load({ env: { TLS_CA_FILE: dir } })), `tls.ca_file: cannot read ${dir}: it is a directory`);
  t.match(
    configErrorOf(() => load({ env: { TLS_CA_FILE: path.join(dir, 'notes.txt') } })),
    `tls.ca_file: ${path.join(dir, 'notes.txt')} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
  );
  t.match(
    configErrorOf(() => load({ env: { TLS_CA_FILE: path.join(dir, 'broken.pem') } })),
    new RegExp(`tls\\.ca_file: certificate 2 of ${path.join(dir, 'broken.pem').replace(/[.]/g, '\\.')} does not parse: `),
  );
});

t.test("the service's clients trust a server whose certificate tls.ca_file's CA signed", { skip }, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'factlog-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const authority = certificateAuthority(dir, 'Factlog private CA', 'localhost');
  // An OpenAI-compatible model server, a web page and an OpenSearch node, behind the private CA.
  const server = createServer({ key: authority.key, cert: authority.cert }, (request, response) => {
    response.setHeader('content-type', 'application/json');
    if (request.url === '/v1/embeddings') response.end(JSON.stringify({ data: [{ index: 0, embedding: [0.6, 0.8] }] }));
    else if (request.url === '/page') response.end(JSON.stringify({ page: true }));
    else response.end(JSON.stringify({ version: { number: '2.19.1', distribution: 'opensearch' } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const base = `https://localhost:${(server.address() as AddressInfo).port}`;

  const config = buildConfig({ tls: { ca_file: authority.caFile } });
  const embedder = createOpenAIEmbedder({
    baseUrl: `${base}/v1`,
    model: 'private',
    dimensions: 2,
    retry: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, perCallTimeoutMs: 5_000 },
  });
  const fetcher = createHttpFetcher({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1 }, { addressPolicy: addressPolicyFromConfig(config) });
  const openSearch = new OpenSearchClient({ node: base, maxRetries: 0 });
  t.teardown(() => openSearch.close());
  const attempts = async () => ({
    embeddings: await embedder.embed(['x']).then(() => 'trusted', (error: unknown) => String(error)),
    web: await fetcher.fetch(`${base}/page`).then(() => 'trusted', (error: unknown) => String(error)),
    openSearch: await openSearch.info().then(() => 'trusted', (error: unknown) => String(error)),
  });

  const before = await attempts();
  for (const [client, outcome] of Object.entries(before)) t.match(outcome, /certificate/, `${client}: refused before`);

  const nodeDefaults = tls.getCACertificates('default');
  t.teardown(() => tls.setDefaultCACertificates(nodeDefaults));
  trustConfiguredCertificates(config, process.cwd());
  t.same(await attempts(), { embeddings: 'trusted', web: 'trusted', openSearch: 'trusted' }, 'each trusts it after');
  // Node's list, once set, holds each certificate once: compared by fingerprint.
  const fingerprints = () => new Set(tls.getCACertificates('default').map((pem) => new X509Certificate(pem).fingerprint256));
  const trusted = fingerprints();
  t.ok([...new Set(nodeDefaults.map((pem) => new X509Certificate(pem).fingerprint256))].every((print) => trusted.has(print)), "Node's own CAs are kept");
  t.ok(trusted.has(new X509Certificate(authority.ca).fingerprint256), "the file's are added to them");

  trustConfiguredCertificates(config, process.cwd());
  t.same(fingerprints(), trusted, 'trusting again changes nothing');
});

t.test("EventStoreDB's gRPC client trusts it too, unless GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names grpc-js's own roots", { skip }, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'factlog-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const authority = certificateAuthority(dir, 'Factlog private CA', 'localhost');
  const other = certificateAuthority(dir, 'Another CA', 'localhost');
  // A gRPC server with no services: past the handshake, the client's read is UNIMPLEMENTED.
  const server = new grpc.Server();
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(authority.key), cert_chain: Buffer.from(authority.cert) }]), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  t.teardown(() => server.forceShutdown());

  // grpc-js reads the variable when it loads, so each run is a process of its own.
  const run = async (grpcRoots: string | undefined): Promise<{ before: string; after: string }> => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const name of ['NODE_OPTIONS', 'NODE_EXTRA_CA_CERTS', 'GRPC_DEFAULT_SSL_ROOTS_FILE_PATH']) delete env[name];
    if (grpcRoots !== undefined) env.GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = grpcRoots;
    const child = path.join(import.meta.dirname, '../helpers/esdbTrustChild.ts');
    const loader = path.join(import.meta.dirname, '../loader.mjs');
    const { stdout } = await execFileAsync(process.execPath, [`--import=${loader}`, child, `esdb://localhost:${port}?tls=true`, authority.caFile], { env, timeout: 120_000 });
    return JSON.parse(stdout) as { before: string; after: string };
  };

  const plain = await run(undefined);
  t.match(plain.before, /unable to verify the first certificate/, 'refused before');
  t.match(plain.after, /UNIMPLEMENTED/, 'past the handshake after');

  const ownRoots = await run(other.caFile);
  t.match(ownRoots.after, /unable to verify the first certificate/, "with grpc-js's own roots file it is not trusted");
  const warnings: string[] = [];
  const onEventStoreDb = buildConfig({ tls: { ca_file: authority.caFile }, eventstore: { backend: 'eventstoredb', eventstoredb: { connection_string: 'esdb://db:2113' } } });
  const nodeDefaults = tls.getCACertificates('default');
  t.teardown(() => tls.setDefaultCACertificates(nodeDefaults));
  trustConfiguredCertificates(onEventStoreDb, process.cwd(), { env: { GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: other.caFile }, warn: (message) => warnings.push(message) });
  t.match(warnings, [/tls\.ca_file is not trusted by the EventStoreDB client: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH is set/], 'which the start warns about');
  trustConfiguredCertificates(onEventStoreDb, process.cwd(), { env: {}, warn: (message) => warnings.push(message) });
  t.equal(warnings.length, 1, 'and not without the variable');
});
