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
const MESSAGE = 'destination not allowed';

const forbiddenV4 = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this network", includes the unspecified 0.0.0.0
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // shared address space (carrier NAT); includes 100.100.100.200 (Alibaba metadata)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local; includes 169.254.169.254 (cloud metadata)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, includes broadcast 255.255.255.255
] as const) {
  forbiddenV4.addSubnet(network, prefix, 'ipv4');
}

const forbiddenV6 = new BlockList();
forbiddenV6.addAddress('::', 'ipv6'); // unspecified
forbiddenV6.addAddress('::1', 'ipv6'); // loopback
for (const [network, prefix] of [
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated, still private in practice)
  ['fc00::', 7], // unique-local; includes fd00:ec2::254 (AWS metadata)
  ['ff00::', 8], // multicast
  ['64:ff9b:1::', 48], // NAT64 for local use: translates to networks of the operator's choosing
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

/** The IPv4 address an IPv6 address carries and is routed to, if it is of a form that embeds one. */
function embeddedIpv4(groups: number[]): string | undefined {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = groups;
  const zeroTo80 = g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0 && g4 === 0;
  if (zeroTo80 && (g5 === 0xffff || g5 === 0)) return ipv4Of(g6, g7); // ::ffff:a.b.c.d, ::a.b.c.d
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) {
    return ipv4Of(g6, g7); // NAT64 well-known prefix 64:ff9b::/96
  }
  if (g0 === 0x2002) return ipv4Of(g1, g2); // 6to4 2002:a.b.c.d::/48
  return undefined;
}

/**
 * True when a connection to `address` could reach the host itself, a private or link-local
 * network, or a cloud metadata service; also true for anything that is not an IP address, since
 * it cannot be judged.
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
      if (ipv4 !== undefined) return forbiddenV4.check(ipv4, 'ipv4');
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
  return Object.assign(new Error(MESSAGE), { code: DESTINATION_NOT_ALLOWED, hostname });
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
