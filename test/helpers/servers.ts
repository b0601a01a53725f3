/**
 * Whether this run may use the PostgreSQL server (and Kafka, OpenSearch). `make test-unit` sets
 * FACTLOG_TEST_SERVERS=none: it runs no `*.server.test.ts` file, and suites written for both
 * database tiers then run on PGlite only. Every other run (`make test`, `npx tap <file>`) uses them.
 */
export const withServers = process.env.FACTLOG_TEST_SERVERS !== 'none';

const VALUES = ['none', 'all'];
if (process.env.FACTLOG_TEST_SERVERS !== undefined && !VALUES.includes(process.env.FACTLOG_TEST_SERVERS)) {
  throw new Error(`FACTLOG_TEST_SERVERS must be one of ${VALUES.join(', ')}, not ${JSON.stringify(process.env.FACTLOG_TEST_SERVERS)}`);
}
