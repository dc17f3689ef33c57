import dns from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Where an API-made endpoint may be sent deliveries. Its host is judged twice: an IP literal in
 * the URL before connecting (net.connect does not look those up), and every address a name
 * resolves to at the moment of each connect, so a name that first answers a public address and
 * later a private one (DNS rebinding) is refused on the connect that would reach the private one.
 */

/** The `code` of the error a refused destination fails with. */
export const DESTINATION_NOT_ALLOWED = 'EDESTINATIONNOTALLOWED';
/** What a refused destination's error says, first. */
export const DESTINATION_NOT_ALLOWED_MESSAGE = 'destination not allowed';

// Every entry of IANA's IPv4 Special-Purpose Address Registry (those marked globally reachable
// too: they are anycast services, where no receiver lives), multicast, and cloud metadata.
const forbiddenV4 = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this network", includes the unspecified 0.0.0.0
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // shared address space (carrier NAT); includes 100.100.100.200 (Alibaba metadata)
  ['127.0.0.0', 8], // loopback
  ['168.63.129.16', 32], // Azure's platform address (WireServer), reachable from inside Azure only
  ['169.254.0.0', 16], // link-local; includes 169.254.169.254 (cloud metadata)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments (DS-Lite, PCP and TURN anycast, NAT64 discovery)
  ['192.0.2.0', 24], // documentation, TEST-NET-1
  ['192.31.196.0', 24], // AS112 DNS sinks
  ['192.52.193.0', 24], // AMT relays
  ['192.88.99.0', 24], // 6to4 relay anycast, deprecated
  ['192.168.0.0', 16], // private
  ['192.175.48.0', 24], // AS112 direct delegation
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation, TEST-NET-2
  ['203.0.113.0', 24], // documentation, TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, includes broadcast 255.255.255.255
] as const) {
  forbiddenV4.addSubnet(network, prefix, 'ipv4');
}

// IPv6 forms that embed an IPv4 address are judged by it before this list is (embeddedIpv4).
const forbiddenV6 = new BlockList();
for (const [network, prefix] of [
  // Outside global unicast 2000::/3: ::, ::1, discard-only 100::/64, dummy 100:0:0:1::/64,
  // NAT64 local-use 64:ff9b:1::/48 (its IPv4 sits where the operator chose), SRv6 SIDs
  // 5f00::/16, unique-local fc00::/7 (AWS metadata fd00:ec2::254), link-local fe80::/10,
  // site-local fec0::/10, multicast ff00::/8, and the space IANA has not allocated.
  ['::', 3],
  ['4000::', 2],
  ['8000::', 1],
  // IETF protocol assignments (but Teredo 2001::/32): anycast, benchmarking 2001:2::/48, AMT,
  // AS112, ORCHID 2001:10::/28, ORCHIDv2 2001:20::/28, drone tags 2001:30::/28.
  ['2001::', 23],
  ['2001:db8::', 32], // documentation
  ['2620:4f:8000::', 48], // AS112 direct delegation
  ['3fff::', 20], // documentation
] as const) {
  forbiddenV6.addSubnet(network, prefix, 'ipv6');
}

/** The eight 16-bit groups of a valid IPv6 address (without zone id), in any spelling. */
function ipv6Groups(address: string): number[] {
  let text = address.toLowerCase();
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const [a = 0, b = 0, c = 0, d = 0] = tail.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const parse = (part: string) =>
    part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16));
  const gap = text.indexOf('::');
  if (gap === -1) return parse(text);
  const head = parse(text.slice(0, gap));
  const rest = parse(text.slice(gap + 2));
  return [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
}

function ipv4Of(high: number, low: number): string {
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
}

/**
 * The IPv4 addresses an IPv6 address carries and is routed by, if it is of a form that embeds
 * any; every one of them must be allowed for the IPv6 address to be.
 */
function embeddedIpv4(groups: number[]): string[] | undefined {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = groups;
  const upTo64Zero = g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0;
  // IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d (also :: and ::1, judged as 0.0.0.x).
  if (upTo64Zero && g4 === 0 && (g5 === 0xffff || g5 === 0)) return [ipv4Of(g6, g7)];
  if (upTo64Zero && g4 === 0xffff && g5 === 0) return [ipv4Of(g6, g7)]; // IPv4-translated ::ffff:0:a.b.c.d
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) {
    return [ipv4Of(g6, g7)]; // NAT64 well-known prefix 64:ff9b::/96
  }
  if (g0 === 0x2002) return [ipv4Of(g1, g2)]; // 6to4 2002:a.b.c.d::/48
  // Teredo 2001::/32: the server's IPv4, and the client's, which is the last 32 bits inverted.
  if (g0 === 0x2001 && g1 === 0) return [ipv4Of(g2, g3), ipv4Of(g6 ^ 0xffff, g7 ^ 0xffff)];
  return undefined;
}

/**
 * True when a connection to `address` could reach the host itself, a private, link-local or
 * other special-purpose network, or a cloud metadata service; also true for anything that is
 * not an IP address, since it cannot be judged.
 */
export function isForbiddenAddress(address: string): boolean {
  let text = address.trim();
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);
  switch (isIP(text)) {
    case 4:
      return forbiddenV4.check(text, 'ipv4');
    case 6: {
      const ipv4 = embeddedIpv4(ipv6Groups(text));
      if (ipv4 !== undefined) return ipv4.some((inner) => forbiddenV4.check(inner, 'ipv4'));
      return forbiddenV6.check(text, 'ipv6');
    }
    default:
      return true;
  }
}

/**
 * For the hostname of an endpoint URL (`[::1]` brackets allowed): true when it is an IP literal
 * that is forbidden or a `localhost` name. Other names are false here: what they resolve to is
 * judged at connect time by `guardedLookup`.
 */
export function forbiddenHost(hostname: string): boolean {
  let host = hostname.trim().toLowerCase();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (host === '') return true;
  if (isIP(host.split('%')[0] ?? '') !== 0) return isForbiddenAddress(host);
  return host === 'localhost' || host.endsWith('.localhost');
}

/** The error a delivery to a forbidden destination fails with. */
export function destinationNotAllowed(hostname: string): NodeJS.ErrnoException {
  return Object.assign(new Error(DESTINATION_NOT_ALLOWED_MESSAGE), {
    code: DESTINATION_NOT_ALLOWED,
    hostname,
  });
}

/**
 * A lookup for net.connect / tls.connect that resolves with `resolve` (dns.lookup in use) and
 * fails with `destinationNotAllowed` when any of the addresses it answers is forbidden. It runs
 * on every connect, so each new connection is judged by what the name resolves to then.
 */
export function createGuardedLookup(resolve: LookupFunction): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, options, (error, address, family) => {
      if (error) {
        callback(error, address, family);
        return;
      }
      const addresses = Array.isArray(address) ? address.map((a) => a.address) : [address];
      if (addresses.length === 0 || addresses.some(isForbiddenAddress)) {
        callback(destinationNotAllowed(hostname), options.all ? [] : '');
        return;
      }
      callback(null, address, family);
    });
  };
}

/** dns.lookup, refusing forbidden addresses: the `lookup` of connections to API-made endpoints. */
export const guardedLookup: LookupFunction = createGuardedLookup(dns.lookup as LookupFunction);

/** The undici `connect` options added for an API-made endpoint: none when private networks are allowed. */
export function connectOptions(allowPrivate: boolean): { lookup?: LookupFunction } {
  return allowPrivate ? {} : { lookup: guardedLookup };
}
