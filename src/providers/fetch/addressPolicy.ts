import dns from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

import type { Config, Profile } from '../../config/types.js';

/**
 * Which network addresses an outbound fetch may reach. The service fetches URLs that users give
 * it (sources, images, OAuth client metadata documents); without this guard a user could aim it
 * at the service's own network (loopback, cloud metadata at 169.254.169.254, private ranges).
 *
 * The check runs on every address a host name resolves to, inside the socket's own `lookup`, so
 * the address checked is the address connected to (no window between check and connect); literal
 * IP hosts are checked before a request is made, and both again on every redirect.
 */
export interface AddressPolicySettings {
  /** 127.0.0.0/8 and ::1 are reachable (the development profiles: the README walk-through fetches local files). */
  allowLoopback: boolean;
  /** Host names always reachable whatever they resolve to: `intranet.example` or `*.example` (any subdomain). */
  allowHosts: readonly string[];
  /** Address ranges reachable although private: `10.1.0.0/16`, `fd00::/8`, or one address. */
  allowCidrs: readonly string[];
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to all its addresses; tests inject one to see what was asked and to answer without DNS. */
export type HostResolver = (hostname: string) => Promise<ResolvedAddress[]>;

/** The verdict on one address: refused ones say which range they fell in. */
export type AddressVerdict = { allowed: true } | { allowed: false; range: string };

/** A fetch aimed at an address the policy refuses; permanent: trying again reaches the same address. */
export class RefusedAddressError extends Error {
  override readonly name = 'RefusedAddressError';
  readonly code = 'ERR_ADDRESS_REFUSED';
  readonly permanent = true;

  constructor(
    readonly host: string,
    readonly address: string,
    readonly range: string,
  ) {
    // "an unspecified", "an IPv4-compatible", "a unique-local": the article the range's name takes.
    const article = /^(?!uni)[aeiou]/i.test(range) ? 'an' : 'a';
    super(
      host === address
        ? `${address} is ${article} ${range} address; outbound fetches to it are refused (allow it with network.allow_cidrs)`
        : `${host} resolves to ${address}, ${article} ${range} address; outbound fetches to it are refused (allow it with network.allow_hosts or network.allow_cidrs)`,
    );
  }
}

// [network, prefix, what it is]. IPv4 ranges also apply to IPv4 embedded in IPv6 (mapped, NAT64, 6to4).
const REFUSED_V4: ReadonlyArray<readonly [string, number, string]> = [
  ['0.0.0.0', 8, 'unspecified ("this network")'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local (cloud metadata)'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignment'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved or broadcast'],
];
const REFUSED_V6: ReadonlyArray<readonly [string, number, string]> = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['::', 96, 'IPv4-compatible (deprecated)'],
  ['100::', 64, 'discard-only'],
  ['2001:db8::', 32, 'documentation'],
  ['fc00::', 7, 'unique-local'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local (deprecated)'],
  ['ff00::', 8, 'multicast'],
];

function blockListOf(entries: ReadonlyArray<readonly [string, number, string]>, family: 'ipv4' | 'ipv6') {
  return entries.map(([network, prefix, label]) => {
    const list = new BlockList();
    list.addSubnet(network, prefix, family);
    return { list, family, label };
  });
}
const refusedRanges = [...blockListOf(REFUSED_V4, 'ipv4'), ...blockListOf(REFUSED_V6, 'ipv6')];

/** Expands an IPv6 text into its eight 16-bit groups (an embedded dotted IPv4 tail included). */
function ipv6Groups(address: string): number[] {
  let text = address.toLowerCase().split('%')[0];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1].split('.').map(Number);
    text = `${text.slice(0, -dotted[1].length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const zeros = tail === undefined ? [] : new Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].map((group) => Number.parseInt(group, 16));
}

const v4FromGroups = (high: number, low: number) => `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;

/** The IPv4 address an IPv6 address carries: IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) or 6to4 (2002::/16). */
function embeddedIpv4(address: string): string | null {
  const g = ipv6Groups(address);
  if (g.length !== 8) return null;
  const zeroUntil = (n: number) => g.slice(0, n).every((group) => group === 0);
  if (zeroUntil(5) && g[5] === 0xffff) return v4FromGroups(g[6], g[7]);
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((group) => group === 0)) return v4FromGroups(g[6], g[7]);
  if (g[0] === 0x2002) return v4FromGroups(g[1], g[2]);
  return null;
}

/** The refused range an address is in, or null: the built-in list, ignoring any allowance. */
export function refusedRangeOf(address: string): string | null {
  const family = isIP(address);
  if (family === 0) return 'unparseable';
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4 !== null) {
      const inner = refusedRangeOf(v4);
      return inner === null ? null : `${inner} (embedded in IPv6 ${address})`;
    }
  }
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const range of refusedRanges) {
    if (range.family === type && range.list.check(address.split('%')[0], type)) return range.label;
  }
  return null;
}

/** Strips the brackets URL hosts put around IPv6 literals. */
const bareHost = (hostname: string) => (hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname);

const defaultResolver: HostResolver = async (hostname) => {
  const answers = await dns.promises.lookup(hostname, { all: true, verbatim: true });
  return answers.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 }));
};

export interface AddressPolicy {
  readonly settings: Readonly<AddressPolicySettings>;
  /** Whether an address may be connected to. */
  checkAddress(address: string): AddressVerdict;
  /** Whether a host name is on the allow-list (then whatever it resolves to is reachable). */
  isAllowedHost(hostname: string): boolean;
  /** Throws RefusedAddressError when the URL's host is a literal IP the policy refuses; names are checked at connect time. */
  assertUrlHost(url: URL): void;
  /** Resolves a host name and throws RefusedAddressError unless every address is allowed (for callers that do not use `lookup`). */
  assertHostResolvesAllowed(hostname: string): Promise<ResolvedAddress[]>;
  /** A `lookup` for node http/https/net: resolves, refuses when any address is refused, else connects to what was checked. */
  readonly lookup: LookupFunction;
}

/** One `network.allow_cidrs` entry read: an address and a prefix length, or what is wrong with it (never echoing it). */
export function parseCidr(entry: string): { network: string; prefix: number; type: 'ipv4' | 'ipv6' } | { problem: string } {
  const parts = entry.trim().split('/');
  const family = isIP(parts[0]);
  if (family === 0 || parts.length > 2) return { problem: 'must be an IP address or a CIDR range such as 10.20.0.0/16 or fd00::/8' };
  const longest = family === 4 ? 32 : 128;
  // Decimal digits only: Number() would take '' (a trailing slash) as 0, which allows everything.
  const prefix = parts.length === 1 ? longest : /^[0-9]{1,3}$/.test(parts[1]) ? Number(parts[1]) : NaN;
  if (!(prefix <= longest)) return { problem: `must have a prefix length from 0 to ${longest}` };
  return { network: parts[0], prefix, type: family === 4 ? 'ipv4' : 'ipv6' };
}

/** The configuration validates the entries (parseCidr); a bad one here is a caller's bug. */
function cidrList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  cidrs.forEach((entry, index) => {
    const cidr = parseCidr(entry);
    if ('problem' in cidr) throw new Error(`network.allow_cidrs[${index}]: ${cidr.problem}`);
    list.addSubnet(cidr.network, cidr.prefix, cidr.type);
  });
  return list;
}

export function createAddressPolicy(settings: AddressPolicySettings, resolver: HostResolver = defaultResolver): AddressPolicy {
  const allowed = cidrList(settings.allowCidrs);
  const hostPatterns = settings.allowHosts.map((host) => host.trim().toLowerCase()).filter(Boolean);

  function checkAddress(address: string): AddressVerdict {
    const bare = bareHost(address).split('%')[0];
    const family = isIP(bare);
    if (family === 0) return { allowed: false, range: 'unparseable' };
    const range = refusedRangeOf(bare);
    if (range === null) return { allowed: true };
    const v4 = family === 6 ? embeddedIpv4(bare) : null;
    const candidates = v4 === null ? [bare] : [bare, v4];
    for (const candidate of candidates) {
      const type = isIP(candidate) === 4 ? 'ipv4' : 'ipv6';
      if (allowed.check(candidate, type)) return { allowed: true };
      if (settings.allowLoopback && refusedRangeOf(candidate) === 'loopback') return { allowed: true };
    }
    return { allowed: false, range };
  }

  function isAllowedHost(hostname: string): boolean {
    const host = bareHost(hostname).toLowerCase().replace(/\.$/, '');
    return hostPatterns.some((pattern) => (pattern.startsWith('*.') ? host.endsWith(pattern.slice(1)) : host === pattern));
  }

  function assertUrlHost(url: URL): void {
    const host = bareHost(url.hostname);
    if (isIP(host) === 0 || isAllowedHost(host)) return;
    const verdict = checkAddress(host);
    if (!verdict.allowed) throw new RefusedAddressError(host, host, verdict.range);
  }

  async function assertHostResolvesAllowed(hostname: string): Promise<ResolvedAddress[]> {
    const host = bareHost(hostname);
    if (isIP(host) !== 0) {
      assertUrlHost(new URL(`http://${isIP(host) === 6 ? `[${host}]` : host}/`));
      return [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
    }
    const addresses = await resolver(host);
    if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
    if (isAllowedHost(host)) return addresses;
    for (const { address } of addresses) {
      const verdict = checkAddress(address);
      if (!verdict.allowed) throw new RefusedAddressError(host, address, verdict.range);
    }
    return addresses;
  }

  const lookup: LookupFunction = (hostname, options, callback) => {
    assertHostResolvesAllowed(hostname).then(
      (addresses) => {
        const wanted = options.family === 4 || options.family === 6 ? addresses.filter((entry) => entry.family === options.family) : addresses;
        if (wanted.length === 0) {
          callback(Object.assign(new Error(`${hostname} has no IPv${options.family} address`), { code: 'ENOTFOUND' }), '', 4);
          return;
        }
        // Node asks for all addresses when it races IPv4 and IPv6 (autoSelectFamily), else for one.
        if (options.all) callback(null, wanted);
        else callback(null, wanted[0].address, wanted[0].family);
      },
      (error: NodeJS.ErrnoException) => callback(error, '', 4),
    );
  };

  return { settings: Object.freeze({ ...settings }), checkAddress, isAllowedHost, assertUrlHost, assertHostResolvesAllowed, lookup };
}

/** The development profiles reach loopback so local walk-throughs work; distributed and production do not unless configured. */
const profileAllowsLoopback = (profile: Profile) => profile === 'embedded' || profile === 'dev';

/** The policy the `network` configuration section describes. */
export function addressPolicyFromConfig(config: Pick<Config, 'profile' | 'network'>, resolver?: HostResolver): AddressPolicy {
  const { allow_loopback, allow_hosts, allow_cidrs } = config.network;
  return createAddressPolicy(
    {
      allowLoopback: allow_loopback === 'auto' ? profileAllowsLoopback(config.profile) : allow_loopback === 'always',
      allowHosts: allow_hosts,
      allowCidrs: allow_cidrs,
    },
    resolver,
  );
}
