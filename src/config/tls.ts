import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { type Config, ConfigError } from './types.js';

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

const READ_FAILURES: Readonly<Record<string, string>> = {
  ENOENT: 'no such file',
  EISDIR: 'it is a directory',
  EACCES: 'permission denied',
  ENOTDIR: 'a part of the path is not a directory',
};

/**
 * The certificates of a PEM file (`tls.ca_file`), each checked to parse, or what is wrong with the
 * file. Node itself only warns about a NODE_EXTRA_CA_CERTS it cannot load and goes on without it,
 * so the first sign was every TLS connection failing with "unable to verify the first certificate".
 */
function readCaCertificates(file: string): { certificates: string[] } | { problem: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? '';
    return { problem: `cannot read ${file}: ${READ_FAILURES[code] ?? (error as Error).message}` };
  }
  const certificates = text.match(PEM_CERTIFICATE) ?? [];
  if (certificates.length === 0) return { problem: `${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)` };
  for (const [index, certificate] of certificates.entries()) {
    try {
      new X509Certificate(certificate);
    } catch (error) {
      return { problem: `certificate ${index + 1} of ${file} does not parse: ${(error as Error).message}` };
    }
  }
  return { certificates };
}

/** `tls.ca_file` as a path: a relative one is read from the working directory, as `storage.data_dir` is. */
function caFilePath(caFile: string, cwd: string): string {
  return path.resolve(cwd, caFile);
}

/** The problem of `tls.ca_file`, for validation; none when it is empty or of the wrong type (the schema's). */
export function caFileProblems(tree: unknown, cwd: string): Array<[string, string]> {
  const caFile = (tree as { tls?: { ca_file?: unknown } } | null)?.tls?.ca_file;
  if (typeof caFile !== 'string' || caFile === '') return [];
  const read = readCaCertificates(caFilePath(caFile, cwd));
  return 'problem' in read ? [['tls.ca_file', read.problem]] : [];
}

/** Node's default CAs as they were before the first call below: the base the file's are added to. */
let nodeDefaultCertificates: string[] | undefined;

/**
 * Adds the certificates of `tls.ca_file` to the CAs that every TLS client of this thread trusts
 * when it is given none of its own: pg, the OpenSearch client, grpc-js (EventStoreDB), `fetch`
 * (model servers) and `https` (the web fetcher) alike, as NODE_EXTRA_CA_CERTS would. Called
 * where a context opens (the CLI and the service), so one setting covers every client; the worker
 * threads make no TLS connections. Calling it again replaces what an earlier call added.
 * grpc-js trusts only GRPC_DEFAULT_SSL_ROOTS_FILE_PATH's file when that variable is set (read
 * when it loads): `warn` says so when the event store is EventStoreDB.
 */
export function trustConfiguredCertificates(
  config: Pick<Config, 'tls' | 'eventstore'>,
  cwd: string,
  { env = process.env, warn = () => undefined }: { env?: NodeJS.ProcessEnv; warn?: (message: string) => void } = {},
): void {
  if (config.tls.ca_file === '') return;
  const read = readCaCertificates(caFilePath(config.tls.ca_file, cwd));
  // Validated when loaded; the file may have changed since.
  if ('problem' in read) throw new ConfigError(`tls.ca_file: ${read.problem}`);
  nodeDefaultCertificates ??= tls.getCACertificates('default');
  tls.setDefaultCACertificates([...nodeDefaultCertificates, ...read.certificates]);
  const grpcRoots = env.GRPC_DEFAULT_SSL_ROOTS_FILE_PATH ?? '';
  const { backend, eventstoredb } = config.eventstore;
  if (grpcRoots !== '' && backend === 'eventstoredb' && !/[?&]tlsCAFile=/i.test(eventstoredb.connection_string)) {
    warn(
      `tls.ca_file is not trusted by the EventStoreDB client: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH is set, and grpc-js then trusts that file alone; ` +
        'add the CA to that file, unset the variable, or give tlsCAFile=<file> in eventstore.eventstoredb.connection_string',
    );
  }
}
