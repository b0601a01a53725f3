export * from './types.js';
export { parseDuration, isDuration } from './duration.js';
export {
  loadConfig,
  defaultConfig,
  buildConfig,
  packagedDefaultsPath,
  configSchemaPath,
  type LoadConfigOptions,
} from './load.js';
export {
  bootstrapAdminFromEnv,
  BOOTSTRAP_ADMIN_VARIABLES,
  missingBootstrapAdminVariables,
  environmentNameOf,
  parseBooleanText,
  SPEC_ENVIRONMENT_NAMES,
  type BootstrapAdmin,
} from './env.js';
export { checkSecrets, MIN_JWT_SECRET_BYTES, type ConfigWarningLog } from './secrets.js';
export { postgresDatabaseProblem, worstCaseLlmCallMs } from './validate.js';
export { trustConfiguredCertificates } from './tls.js';
export {
  publicBaseUrl,
  oauthIssuer,
  dataPaths,
  databaseOptions,
  registryEndpoints,
  type DataPaths,
} from './derived.js';
