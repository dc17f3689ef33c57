import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, LookupFunction } from 'node:net';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectOptions,
  createGuardedLookup,
  DESTINATION_NOT_ALLOWED,
  forbiddenHost,
  guardedLookup,
  isForbiddenAddress,
} from '../../../src/webhooks/security/destination.js';

describe('isForbiddenAddress', () => {
  // Each special-purpose range by its first and last address (or one inside it); nothing connects.
  it.each([
    ['this network 0/8', '0.0.0.0'],
    ['this network 0/8', '0.255.255.255'],
    ['private 10/8', '10.0.0.0'],
    ['private 10/8', '10.255.255.255'],
    ['CGNAT 100.64/10', '100.64.0.0'],
    ['CGNAT 100.64/10 (Alibaba metadata)', '100.100.100.200'],
    ['CGNAT 100.64/10', '100.127.255.255'],
    ['loopback 127/8', '127.0.0.1'],
    ['loopback 127/8', '127.255.255.255'],
    ['Azure platform address', '168.63.129.16'],
    ['link-local 169.254/16', '169.254.0.0'],
    ['link-local 169.254/16 (cloud metadata)', '169.254.169.254'],
    ['link-local 169.254/16', '169.254.255.255'],
    ['private 172.16/12', '172.16.0.0'],
    ['private 172.16/12', '172.31.255.255'],
    ['IETF protocol assignments 192.0.0/24', '192.0.0.0'],
    ['IETF protocol assignments 192.0.0/24 (PCP anycast)', '192.0.0.9'],
    ['IETF protocol assignments 192.0.0/24 (NAT64 discovery)', '192.0.0.171'],
    ['IETF protocol assignments 192.0.0/24', '192.0.0.255'],
    ['TEST-NET-1 192.0.2/24', '192.0.2.0'],
    ['TEST-NET-1 192.0.2/24', '192.0.2.255'],
    ['AS112 192.31.196/24', '192.31.196.1'],
    ['AMT 192.52.193/24', '192.52.193.1'],
    ['6to4 relay anycast 192.88.99/24', '192.88.99.1'],
    ['private 192.168/16', '192.168.0.0'],
    ['private 192.168/16', '192.168.255.255'],
    ['AS112 direct delegation 192.175.48/24', '192.175.48.1'],
    ['benchmarking 198.18/15', '198.18.0.0'],
    ['benchmarking 198.18/15', '198.19.255.255'],
    ['TEST-NET-2 198.51.100/24', '198.51.100.0'],
    ['TEST-NET-2 198.51.100/24', '198.51.100.255'],
    ['TEST-NET-3 203.0.113/24', '203.0.113.0'],
    ['TEST-NET-3 203.0.113/24', '203.0.113.255'],
    ['multicast 224/4', '224.0.0.0'],
    ['multicast 224/4', '239.255.255.255'],
    ['reserved 240/4', '240.0.0.0'],
    ['broadcast', '255.255.255.255'],
    ['unspecified ::', '::'],
    ['loopback ::1', '::1'],
    ['loopback ::1', '0:0:0:0:0:0:0:1'],
    ['loopback ::1', '[::1]'],
    ['discard-only 100::/64', '100::'],
    ['discard-only 100::/64', '100::ffff:ffff:ffff:ffff'],
    ['dummy prefix 100:0:0:1::/64', '100:0:0:1::1'],
    ['NAT64 local use 64:ff9b:1::/48', '64:ff9b:1::'],
    ['NAT64 local use 64:ff9b:1::/48', '64:ff9b:1:ffff:ffff:ffff:808:808'],
    ['IETF protocol assignments 2001::/23 (PCP anycast)', '2001:1::1'],
    ['IETF protocol assignments 2001::/23', '2001:1ff:ffff::1'],
    ['benchmarking 2001:2::/48', '2001:2::'],
    ['benchmarking 2001:2::/48', '2001:2:0:ffff:ffff:ffff:ffff:ffff'],
    ['AMT 2001:3::/32', '2001:3::1'],
    ['AS112 2001:4:112::/48', '2001:4:112::1'],
    ['ORCHID 2001:10::/28', '2001:10::'],
    ['ORCHID 2001:10::/28', '2001:1f:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['ORCHIDv2 2001:20::/28', '2001:20::'],
    ['ORCHIDv2 2001:20::/28', '2001:2f:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['drone tags 2001:30::/28', '2001:30::1'],
    ['documentation 2001:db8::/32', '2001:db8::'],
    ['documentation 2001:db8::/32', '2001:db8:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['AS112 2620:4f:8000::/48', '2620:4f:8000::1'],
    ['documentation 3fff::/20', '3fff::'],
    ['documentation 3fff::/20', '3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['SRv6 SIDs 5f00::/16', '5f00::1'],
    ['unique-local fc00::/7', 'fc00::'],
    ['unique-local fc00::/7 (AWS metadata)', 'fd00:ec2::254'],
    ['unique-local fc00::/7', 'FDFF:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['site-local fec0::/10', 'fec0::1'],
    ['site-local fec0::/10', 'feff:ffff::1'],
    ['link-local fe80::/10', 'fe80::1'],
    ['link-local fe80::/10', 'FE80::1'],
    ['link-local fe80::/10', 'fe80::1%eth0'],
    ['link-local fe80::/10', 'febf:ffff::1'],
    ['multicast ff00::/8', 'ff02::1'],
    ['multicast ff00::/8', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
    ['outside global unicast 2000::/3', 'fbff::1'],
    ['outside global unicast 2000::/3', '4000::1'],
    ['IPv4-mapped loopback', '::ffff:127.0.0.1'],
    ['IPv4-mapped loopback', '::ffff:7f00:1'],
    ['IPv4-mapped loopback', '::FFFF:7F00:0001'],
    ['IPv4-mapped metadata', '0:0:0:0:0:ffff:a9fe:a9fe'],
    ['IPv4-mapped private', '::ffff:10.0.0.1'],
    ['IPv4-mapped TEST-NET-2', '::ffff:198.51.100.7'],
    ['IPv4-compatible loopback', '::127.0.0.1'],
    ['IPv4-compatible private', '::a00:1'],
    ['IPv4-translated loopback', '::ffff:0:127.0.0.1'],
    ['IPv4-translated private', '::ffff:0:c0a8:101'],
    ['NAT64 of loopback', '64:ff9b::127.0.0.1'],
    ['NAT64 of metadata', '64:ff9b::a9fe:a9fe'],
    ['NAT64 of CGNAT', '64:ff9b::100.64.0.1'],
    ['6to4 of loopback', '2002:7f00:1::'],
    ['6to4 of metadata', '2002:a9fe:a9fe::1'],
    ['6to4 of private', '2002:c0a8:101:0:0:0:0:1'],
    ['6to4 of benchmarking', '2002:c612:1::1'],
    ['Teredo with a loopback client', '2001:0:4136:e378:8000:63bf:80ff:fffe'],
    ['Teredo with a TEST-NET-1 client', '2001:0000:4136:e378:8000:63bf:3fff:fdd2'],
    ['Teredo with a private client', '2001:0:4136:e378::3f57:fefe'],
    ['Teredo with a loopback server', '2001:0:7f00:1:8000:63bf:f7f7:f7f7'],
    ['not an address', 'localhost'],
    ['not an address', 'example.com'],
    ['not an address', ''],
    ['not an address', '127.1'],
    ['not an address', '2130706433'],
    ['not an address', '0x7f000001'],
    ['not an address', '1.2.3.4.5'],
    ['not an address', ':::1'],
  ])('refuses %s: %s', (_, address) => {
    expect(isForbiddenAddress(address)).toBe(true);
  });

  it.each([
    '93.184.216.34',
    '8.8.8.8',
    '1.1.1.1',
    '9.255.255.255',
    '11.0.0.1',
    '100.63.255.255',
    '100.128.0.1',
    '126.255.255.255',
    '128.0.0.1',
    '168.63.129.15',
    '169.253.255.255',
    '172.15.255.255',
    '172.32.0.1',
    '192.0.1.1',
    '192.0.3.0',
    '192.88.98.255',
    '192.88.100.0',
    '192.167.255.255',
    '198.17.255.255',
    '198.20.0.1',
    '198.51.99.255',
    '198.51.101.0',
    '203.0.112.255',
    '203.0.114.0',
    '223.255.255.255',
    '2606:4700::1111',
    '2606:4700:4700::1111',
    '2001:4860:4860::8888',
    '2001:200::1',
    '2001:db7:ffff::1',
    '2001:db9::1',
    '2a00:1450:4001:82b::200e',
    '3ffe:ffff::1',
    '3fff:1000::1',
    '[2606:4700::1111]',
    '::ffff:8.8.8.8',
    '::ffff:5db8:d822',
    '::8.8.8.8',
    '::ffff:0:8.8.8.8',
    '64:ff9b::8.8.8.8',
    '2002:808:808::1',
    '2001:0:4136:e378:8000:63bf:f7f7:f7f7',
  ])('allows %s', (address) => {
    expect(isForbiddenAddress(address)).toBe(false);
  });
});

describe('forbiddenHost', () => {
  it.each([
    ['127.0.0.1', true],
    ['[::1]', true],
    ['[::ffff:7f00:1]', true],
    ['[fd00:ec2::254]', true],
    ['169.254.169.254', true],
    ['localhost', true],
    ['LOCALHOST', true],
    ['localhost.', true],
    ['api.localhost', true],
    ['', true],
    ['93.184.216.34', false],
    ['[2606:4700::1111]', false],
    ['example.com', false],
    ['localhost.example.com', false],
    ['notlocalhost', false],
  ])('judges the hostname %j: %s', (hostname, forbidden) => {
    expect(forbiddenHost(hostname)).toBe(forbidden);
  });

  it('judges the hostname of a URL in any spelling of a literal', () => {
    for (const url of [
      'http://[::FFFF:127.0.0.1]/',
      'http://0x7f.1/',
      'http://2130706433/',
      'http://[0:0::1]:8080/',
      'http://[::ffff:0:7f00:1]/',
      'http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/',
      'http://192.0.2.1/',
      'http://[2001:db8::1]/',
    ]) {
      expect(forbiddenHost(new URL(url).hostname)).toBe(true);
    }
  });
});

describe('connectOptions', () => {
  it('adds the guarded lookup unless private networks are allowed', () => {
    expect(connectOptions(false)).toEqual({ lookup: guardedLookup });
    expect(connectOptions(true)).toEqual({});
  });
});

function lookupOnce(
  lookup: LookupFunction,
  hostname: string,
  all: boolean,
): Promise<{ error: NodeJS.ErrnoException | null; address: unknown }> {
  return new Promise((resolve) => {
    lookup(hostname, { all }, (error, address) => resolve({ error, address }));
  });
}

describe('guardedLookup', () => {
  it.each([true, false])(
    'refuses a name that resolves to a loopback address (all: %s)',
    async (all) => {
      const { error } = await lookupOnce(guardedLookup, 'localhost', all);
      expect(error?.code).toBe(DESTINATION_NOT_ALLOWED);
      expect(error?.message).toBe('destination not allowed');
    },
  );

  it('passes a public answer through unchanged, single or all', async () => {
    const answers: LookupFunction = (_hostname, options, callback) => {
      if (options.all) {
        callback(null, [
          { address: '93.184.216.34', family: 4 },
          { address: '2606:4700::1111', family: 6 },
        ]);
      } else callback(null, '93.184.216.34', 4);
    };
    const lookup = createGuardedLookup(answers);
    expect(await lookupOnce(lookup, 'example.com', true)).toEqual({
      error: null,
      address: [
        { address: '93.184.216.34', family: 4 },
        { address: '2606:4700::1111', family: 6 },
      ],
    });
    expect(await lookupOnce(lookup, 'example.com', false)).toEqual({
      error: null,
      address: '93.184.216.34',
    });
  });

  it('refuses when any one of the addresses is forbidden', async () => {
    const answers: LookupFunction = (_hostname, _options, callback) =>
      callback(null, [
        { address: '93.184.216.34', family: 4 },
        { address: '::ffff:169.254.169.254', family: 6 },
      ]);
    const { error } = await lookupOnce(createGuardedLookup(answers), 'example.com', true);
    expect(error?.code).toBe(DESTINATION_NOT_ALLOWED);
  });

  it('passes a resolution error through', async () => {
    const { error } = await lookupOnce(guardedLookup, 'no-such-host.invalid', true);
    expect(error).not.toBeNull();
    expect(error?.code).not.toBe(DESTINATION_NOT_ALLOWED);
  });

  it('judges every resolution, so a name rebound to loopback is refused', async () => {
    const answers = ['93.184.216.34', '127.0.0.1'];
    let calls = 0;
    const rebinding: LookupFunction = (_hostname, _options, callback) => {
      const address = answers[Math.min(calls, answers.length - 1)] ?? '';
      calls += 1;
      callback(null, address, 4);
    };
    const lookup = createGuardedLookup(rebinding);
    const first = await lookupOnce(lookup, 'rebind.example', false);
    expect(first).toEqual({ error: null, address: '93.184.216.34' });
    const second = await lookupOnce(lookup, 'rebind.example', false);
    expect(second.error?.code).toBe(DESTINATION_NOT_ALLOWED);
    expect(calls).toBe(2);
  });
});

describe('an undici Pool connecting through the guard', () => {
  let server: Server;
  let port: number;
  let connections = 0;

  beforeAll(async () => {
    // Every response closes its connection, so each request needs a new connect.
    server = createServer((_request, response) => {
      response.setHeader('connection', 'close');
      response.end('ok');
    });
    server.on('connection', () => {
      connections += 1;
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    server.close();
    await once(server, 'close');
  });

  async function request(origin: string, lookup?: LookupFunction) {
    const pool = new Pool(origin, {
      connections: 1,
      connect: { timeout: 2000, ...(lookup ? { lookup } : {}) },
    });
    try {
      const response = await pool.request({ path: '/', method: 'POST', body: '{}' });
      await response.body.text();
      return response.statusCode;
    } finally {
      await pool.close();
    }
  }

  it('fails a name resolving to loopback before the receiver sees a connection', async () => {
    const before = connections;
    await expect(request(`http://localhost:${port}`, guardedLookup)).rejects.toMatchObject({
      code: DESTINATION_NOT_ALLOWED,
      message: 'destination not allowed',
    });
    expect(connections - before).toBe(0);
  });

  it('reaches the receiver through the same name without the guard', async () => {
    const before = connections;
    await expect(request(`http://localhost:${port}`)).resolves.toBe(200);
    expect(connections - before).toBe(1);
  });

  it('looks the name up again for every new connection', async () => {
    let lookups = 0;
    const counting = createGuardedLookup((_hostname, _options, callback) => {
      lookups += 1;
      callback(null, lookups === 1 ? '93.184.216.34' : '127.0.0.1', 4);
    });
    // The guard judges what the resolver answers: public first, loopback after. The socket is
    // pointed at the local receiver, which stands in for the public host, once the guard passes.
    const toReceiver: LookupFunction = (hostname, options, callback) =>
      counting(hostname, options, (error, address, family) => {
        if (error) callback(error, address, family);
        else if (options.all) callback(null, [{ address: '127.0.0.1', family: 4 }]);
        else callback(null, '127.0.0.1', 4);
      });
    const pool = new Pool(`http://rebind.example:${port}`, {
      connections: 1,
      connect: { timeout: 2000, lookup: toReceiver },
    });
    try {
      const before = connections;
      const first = await pool.request({ path: '/', method: 'GET' });
      await first.body.text();
      expect(connections - before).toBe(1);
      await expect(pool.request({ path: '/', method: 'GET' })).rejects.toMatchObject({
        code: DESTINATION_NOT_ALLOWED,
      });
      expect(connections - before).toBe(1);
      expect(lookups).toBe(2);
    } finally {
      await pool.close();
    }
  });

  it('does not look up an IP literal, which forbiddenHost must refuse before connecting', async () => {
    const before = connections;
    await expect(request(`http://127.0.0.1:${port}`, guardedLookup)).resolves.toBe(200);
    expect(connections - before).toBe(1);
    expect(forbiddenHost(new URL(`http://127.0.0.1:${port}`).hostname)).toBe(true);
  });
});
