import http from 'node:http';
import type { AddressInfo } from 'node:net';

import t, { type Test } from 'tap';

import {
  addressPolicyFromConfig,
  createAddressPolicy,
  refusedRangeOf,
  RefusedAddressError,
  type AddressPolicySettings,
  type HostResolver,
} from '../../../src/providers/fetch/addressPolicy.js';
import { createHttpFetcher, FetchError, type FetchSettings } from '../../../src/providers/fetch/http.js';

const settings: FetchSettings = {
  timeoutMs: 5_000,
  maxAttempts: 3,
  baseDelayMs: 1,
  maxDelayMs: 1,
  retry403MaxAttempts: 0,
  maxBodyBytes: 1024 * 1024,
  userAgent: 'factlog-test/1.0',
  autoSkip: { enabled: false, minSample: 100, failureThreshold: 0.85, cooldownMs: 1 },
};

const PRODUCTION: AddressPolicySettings = { allowLoopback: false, allowHosts: [], allowCidrs: [] };

/** A resolver answering from a table, recording every name it was asked for. */
function tableResolver(table: Record<string, string[]>): HostResolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = async (hostname: string) => {
    asked.push(hostname);
    const addresses = table[hostname];
    if (!addresses) throw Object.assign(new Error(`no such host ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? (6 as const) : (4 as const) }));
  };
  return Object.assign(resolve, { asked });
}

/** A local server that counts every request (and every TCP connection) it receives. */
async function countingServer(t: Test, handler: (request: http.IncomingMessage, response: http.ServerResponse) => void = (_q, r) => r.end('secret')) {
  let requests = 0;
  let connections = 0;
  const server = http.createServer((request, response) => {
    requests += 1;
    handler(request, response);
  });
  server.on('connection', () => void (connections += 1));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  t.teardown(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  return { port, traffic: () => ({ requests, connections }) };
}

async function failure(promise: Promise<unknown>): Promise<FetchError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof FetchError) return error;
    throw error;
  }
  throw new Error('expected the fetch to fail');
}

t.test('the refused ranges: loopback, private, link-local, unique-local, CGNAT, multicast, unspecified, IPv4 inside IPv6', async (t) => {
  const refused = [
    '127.0.0.1',
    '127.255.255.254',
    '10.0.0.1',
    '172.16.5.4',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.251',
    '255.255.255.255',
    '::1',
    '::',
    'fc00::1',
    'fd12:3456::1',
    'fe80::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:169.254.169.254',
    '64:ff9b::a9fe:a9fe',
    '2002:7f00:1::1',
  ];
  for (const address of refused) t.not(refusedRangeOf(address), null, `${address} is refused`);
  t.match(refusedRangeOf('169.254.169.254'), /link-local/);
  t.match(refusedRangeOf('::ffff:127.0.0.1'), /loopback.*embedded/);
  for (const address of ['93.184.216.34', '8.8.8.8', '2606:4700:4700::1111', '::ffff:8.8.8.8', '100.128.0.1', '172.32.0.1']) {
    t.equal(refusedRangeOf(address), null, `${address} is public`);
  }
});

t.test('profiles: embedded and dev reach loopback, distributed and production do not unless configured', async (t) => {
  const network = { allow_loopback: 'auto' as const, allow_hosts: [], allow_cidrs: [] };
  t.ok(addressPolicyFromConfig({ profile: 'embedded', network }).checkAddress('127.0.0.1').allowed);
  t.ok(addressPolicyFromConfig({ profile: 'dev', network }).checkAddress('::1').allowed);
  t.notOk(addressPolicyFromConfig({ profile: 'distributed', network }).checkAddress('127.0.0.1').allowed);
  t.notOk(addressPolicyFromConfig({ profile: 'production', network }).checkAddress('127.0.0.1').allowed);
  t.ok(addressPolicyFromConfig({ profile: 'production', network: { ...network, allow_loopback: 'always' as const } }).checkAddress('127.0.0.1').allowed);
  t.notOk(addressPolicyFromConfig({ profile: 'dev', network: { ...network, allow_loopback: 'never' as const } }).checkAddress('127.0.0.1').allowed);
  // Loopback allowed never opens the metadata address or private ranges.
  t.notOk(addressPolicyFromConfig({ profile: 'embedded', network }).checkAddress('169.254.169.254').allowed);
  t.notOk(addressPolicyFromConfig({ profile: 'embedded', network }).checkAddress('10.0.0.1').allowed);
});

t.test('production: literal private IPs are refused before any connection or DNS query', async (t) => {
  const server = await countingServer(t);
  const resolver = tableResolver({});
  const fetcher = createHttpFetcher(settings, { addressPolicy: createAddressPolicy(PRODUCTION, resolver), sleep: async () => {} });
  for (const url of [`http://127.0.0.1:${server.port}/`, `http://[::ffff:127.0.0.1]:${server.port}/`, `http://2130706433:${server.port}/`, 'http://169.254.169.254/latest/meta-data/']) {
    const error = await failure(fetcher.fetch(url));
    t.equal(error.permanent, true, `${url}: permanent`);
    t.equal(error.reason, 'address refused', url);
    t.equal(error.attempts, 1, `${url}: not retried`);
    t.match(error.message, /outbound fetches to it are refused/);
  }
  t.same(resolver.asked, [], 'no name was resolved');
  t.same(server.traffic(), { requests: 0, connections: 0 }, 'the local server saw no traffic');
});

t.test('production: a host name resolving to loopback or the metadata address is refused after resolution, before connecting', async (t) => {
  const server = await countingServer(t);
  const resolver = tableResolver({ 'metadata.test': ['169.254.169.254'], 'sneaky.test': ['93.184.216.34', '127.0.0.1'] });
  const fetcher = createHttpFetcher(settings, { addressPolicy: createAddressPolicy(PRODUCTION, resolver), sleep: async () => {} });
  const metadata = await failure(fetcher.fetch('http://metadata.test/latest/meta-data/'));
  t.equal(metadata.reason, 'address refused');
  t.match(metadata.message, /metadata\.test resolves to 169\.254\.169\.254, a link-local/);
  // One refused address among several refuses the host: the connection could pick any of them.
  const sneaky = await failure(fetcher.fetch(`http://sneaky.test:${server.port}/`));
  t.equal(sneaky.permanent, true);
  t.match(sneaky.message, /127\.0\.0\.1, a loopback address/);
  t.same(resolver.asked, ['metadata.test', 'sneaky.test']);
  t.same(server.traffic(), { requests: 0, connections: 0 });
});

t.test('a redirect from an allowed host to a private address is refused', async (t) => {
  const server = await countingServer(t, (request, response) => {
    if (request.url === '/to-name') response.writeHead(302, { location: `http://internal.test:${server.port}/secret` }).end();
    else if (request.url === '/to-ip') response.writeHead(301, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
    else response.end('secret');
  });
  const resolver = tableResolver({ 'public.test': ['127.0.0.1'], 'internal.test': ['127.0.0.1'] });
  const policy = createAddressPolicy({ ...PRODUCTION, allowHosts: ['public.test'] }, resolver);
  const fetcher = createHttpFetcher(settings, { addressPolicy: policy, sleep: async () => {} });
  const toName = await failure(fetcher.fetch(`http://public.test:${server.port}/to-name`));
  t.equal(toName.reason, 'address refused');
  t.match(toName.message, /internal\.test resolves to 127\.0\.0\.1/);
  const toIp = await failure(fetcher.fetch(`http://public.test:${server.port}/to-ip`));
  t.equal(toIp.reason, 'address refused');
  t.equal(server.traffic().requests, 2, 'only the two redirecting requests reached the server; /secret never did');
});

t.test('the allow-lists open exactly what they name', async (t) => {
  const server = await countingServer(t);
  const resolver = tableResolver({ 'wiki.corp.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] });
  const byCidr = createHttpFetcher(settings, { addressPolicy: createAddressPolicy({ ...PRODUCTION, allowCidrs: ['127.0.0.0/8'] }, resolver) });
  t.equal((await byCidr.fetch(`http://127.0.0.1:${server.port}/`)).body.toString(), 'secret');
  const byHost = createHttpFetcher(settings, { addressPolicy: createAddressPolicy({ ...PRODUCTION, allowHosts: ['*.corp.test'] }, resolver), sleep: async () => {} });
  t.equal((await byHost.fetch(`http://wiki.corp.test:${server.port}/`)).status, 200);
  t.equal((await failure(byHost.fetch(`http://other.test:${server.port}/`))).reason, 'address refused');
  const loopback = createHttpFetcher(settings, { addressPolicy: createAddressPolicy({ ...PRODUCTION, allowLoopback: true }, resolver) });
  t.equal((await loopback.fetch(`http://127.0.0.1:${server.port}/`)).status, 200);
  t.equal(server.traffic().requests, 3);
  t.throws(() => createAddressPolicy({ ...PRODUCTION, allowCidrs: ['not-an-ip/8'] }), /allow_cidrs/);
});

t.test('assertHostResolvesAllowed: the guard other outbound callers (OAuth client metadata) use', async (t) => {
  const policy = createAddressPolicy(PRODUCTION, tableResolver({ 'ok.test': ['93.184.216.34'], 'bad.test': ['10.1.2.3'] }));
  t.same(await policy.assertHostResolvesAllowed('ok.test'), [{ address: '93.184.216.34', family: 4 }]);
  await t.rejects(policy.assertHostResolvesAllowed('bad.test'), RefusedAddressError);
  await t.rejects(policy.assertHostResolvesAllowed('[::1]'), RefusedAddressError);
});

t.test('the network section loads from the environment and is validated', async (t) => {
  const { mkdtemp } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const { loadConfig, buildConfig } = await import('../../../src/config/load.js');
  const cwd = await mkdtemp(`${tmpdir()}/factlog-network-`);
  const config = loadConfig({ cwd, env: { NETWORK_ALLOW_LOOPBACK: 'never', NETWORK_ALLOW_CIDRS: '10.20.0.0/16, fd00::/8', NETWORK_ALLOW_HOSTS: '*.corp.test' }, warn: () => {} });
  t.same(config.network, { allow_loopback: 'never', allow_hosts: ['*.corp.test'], allow_cidrs: ['10.20.0.0/16', 'fd00::/8'] });
  const policy = addressPolicyFromConfig(config);
  t.ok(policy.checkAddress('10.20.3.4').allowed);
  t.notOk(policy.checkAddress('10.21.3.4').allowed);
  t.notOk(policy.checkAddress('127.0.0.1').allowed, 'never wins over the embedded profile');
  t.throws(() => buildConfig({ network: { allow_loopback: true } }), /allow_loopback/);
});

t.test('a redirect to a URL with credentials is refused without sending them', async (t) => {
  let authorizations = 0;
  const server = await countingServer(t, (request, response) => {
    if (request.headers.authorization) authorizations += 1;
    if (request.url === '/start') response.writeHead(302, { location: `http://admin:hunter2@127.0.0.1:${server.port}/secret` }).end();
    else response.end('secret');
  });
  const fetcher = createHttpFetcher(settings, { addressPolicy: createAddressPolicy({ ...PRODUCTION, allowLoopback: true }), sleep: async () => {} });
  const error = await failure(fetcher.fetch(`http://127.0.0.1:${server.port}/start`));
  t.equal(error.reason, 'invalid redirect');
  t.notMatch(error.message, /hunter2/, 'the password is not repeated');
  t.equal(server.traffic().requests, 1);
  t.equal(authorizations, 0);
});

t.test("a refusal names the range with the article it takes", async (t) => {
  t.equal(new RefusedAddressError('0.0.0.0', '0.0.0.0', 'unspecified ("this network")').message.split(';')[0], '0.0.0.0 is an unspecified ("this network") address');
  t.equal(new RefusedAddressError('::', '::', 'IPv4-compatible (deprecated)').message.split(';')[0], ':: is an IPv4-compatible (deprecated) address');
  t.equal(new RefusedAddressError('fd00::1', 'fd00::1', 'unique-local').message.split(';')[0], 'fd00::1 is a unique-local address');
  t.equal(new RefusedAddressError('x.test', '10.0.0.1', 'private').message.split(';')[0], 'x.test resolves to 10.0.0.1, a private address');
});
