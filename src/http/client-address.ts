import { isIP } from 'node:net';

/** The eight 16-bit groups of an IPv6 address that isIP accepted, zone id dropped. */
function ipv6Groups(address: string): number[] {
  const parse = (part: string) =>
    part === ''
      ? []
      : part.split(':').flatMap((piece) => {
          if (!piece.includes('.')) return [Number.parseInt(piece, 16)];
          const [a = 0, b = 0, c = 0, d = 0] = piece.split('.').map(Number);
          return [(a << 8) | b, (c << 8) | d];
        });
  const [head = '', tail] = address.split('::');
  const before = parse(head);
  const after = tail === undefined ? [] : parse(tail);
  return [...before, ...Array(8 - before.length - after.length).fill(0), ...after];
}

/** RFC 5952's spelling: lowercase, no leading zeros, the first longest run of 2+ zero groups as ::. */
function formatIpv6(groups: number[]): string {
  let runStart = -1;
  let runLength = 1;
  for (let start = 0; start < 8; start++) {
    let end = start;
    while (end < 8 && groups[end] === 0) end++;
    if (end - start > runLength) {
      runStart = start;
      runLength = end - start;
    }
    start = end;
  }
  const hex = (part: number[]) => part.map((group) => group.toString(16)).join(':');
  if (runStart === -1) return hex(groups);
  return `${hex(groups.slice(0, runStart))}::${hex(groups.slice(runStart + runLength))}`;
}

/**
 * The key under which failed authentications of the client at `address` are counted: an IPv4
 * address as itself; an IPv4-mapped IPv6 address as its IPv4; any other IPv6 address as its
 * network of `ipv6Prefix` bits (one subscriber holds a whole /64), in its canonical spelling
 * (RFC 5952), so that every spelling of one address counts once. Anything else (a trusted
 * proxy's garbled X-Forwarded-For) counts as itself.
 */
export function clientKeyOf(address: string, ipv6Prefix: number): string {
  const zone = address.indexOf('%');
  const bare = zone === -1 ? address : address.slice(0, zone);
  if (isIP(bare) !== 6) return address;
  const groups = ipv6Groups(bare);
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    const [high = 0, low = 0] = groups.slice(6);
    return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
  }
  const masked = groups.map((group, index) => {
    const kept = Math.min(Math.max(ipv6Prefix - index * 16, 0), 16);
    return group & (0xffff << (16 - kept)) & 0xffff;
  });
  const network = formatIpv6(masked);
  return ipv6Prefix === 128 ? network : `${network}/${ipv6Prefix}`;
}
