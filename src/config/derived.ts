import path from 'node:path';
import type { DatabaseOptions } from '../db/database.js';
import { type Config, ConfigError, type RegistryEntryConfig } from './types.js';

/** Values the configuration implies, computed one way for every caller. */

/** `server.public_url` without a trailing slash, or `http://localhost:<port>` when empty. */
export function publicBaseUrl(config: Config): string {
  const configured = config.server.public_url.replace(/\/+$/, '');
  return configured === '' ? `http://localhost:${config.server.port}` : configured;
}

/** `oauth.issuer`, or the public base URL when empty (production refuses an empty issuer). */
export function oauthIssuer(config: Config): string {
  return config.oauth.issuer === '' ? publicBaseUrl(config) : config.oauth.issuer.replace(/\/+$/, '');
}

export interface DataPaths {
  dataDir: string;
  /** Source bodies and images. */
  assetsDir: string;
  /** The embedded database of `databases.default` (an empty url). */
  pgliteDir: string;
}

/** Absolute storage paths; a relative `storage.data_dir` resolves against `cwd`. */
export function dataPaths(config: Config, cwd: string = process.cwd()): DataPaths {
  const dataDir = path.resolve(cwd, config.storage.data_dir);
  return { dataDir, assetsDir: path.join(dataDir, 'assets'), pgliteDir: path.join(dataDir, 'pglite') };
}

/**
 * How to open the named database. An empty url is embedded PGlite: `databases.default` lives
 * in `<data_dir>/pglite`, any other name in `<data_dir>/pglite-<name>` so they never share files.
 */
export function databaseOptions(config: Config, name: string, cwd: string = process.cwd()): DatabaseOptions {
  const database = config.databases[name];
  if (!database) throw new ConfigError(`databases.${name}: no such database (known: ${Object.keys(config.databases).join(', ')})`);
  if (database.url === '') {
    const { dataDir, pgliteDir } = dataPaths(config, cwd);
    return { kind: 'pglite', dataDir: name === 'default' ? pgliteDir : path.join(dataDir, `pglite-${name}`) };
  }
  return { kind: 'postgres', url: database.url, maxConns: database.max_conns, sslMode: database.ssl_mode };
}

/**
 * The registries to talk to, with `read_api_key` already falling back to `api_key`. When
 * `registries` is empty, the single block is the registry with id `default` (none when its url is empty).
 */
export function registryEndpoints(config: Config): RegistryEntryConfig[] {
  const registry = config.providers.registry;
  const entries: RegistryEntryConfig[] =
    registry.registries.length > 0
      ? registry.registries
      : registry.url === ''
        ? []
        : [
            {
              id: 'default',
              url: registry.url,
              auth_mode: registry.auth_mode,
              api_key: registry.api_key,
              read_api_key: registry.read_api_key,
              allowed_models: registry.allowed_models,
            },
          ];
  return entries.map((entry) => ({
    ...entry,
    url: entry.url.replace(/\/+$/, ''),
    read_api_key: entry.read_api_key === '' ? entry.api_key : entry.read_api_key,
    allowed_models: [...entry.allowed_models],
  }));
}
