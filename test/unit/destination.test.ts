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
} from '../../src/webhooks/destination.js';

describe('isForbiddenAddress', () => {
  it.each([
    '0.0.0.0',
    '0.1.2.3',
    '10.0.0.1',
    '10.255.255.255',
    '100.64.0.1',
    '100.100.100.200',
    '100.127.255.254',
    '127.0.0.1',
    '127.10.20.30',
    '169.254.0.1',
    '169.254.169.254',
    '172.16.0.1',
    '172.31.255.255',
    '192.0.0.8',
    '192.168.1.1',
    '198.18.0.1',
    '198.19.255.255',
    '224.0.0.1',
    '239.255.255.250',
    '240.0.0.1',
    '255.255.255.255',
    '::',
    '::1',
    '0:0:0:0:0:0:0:1',
    '[::1]',
    'fe80::1',
    'FE80::1',
    'fe80::1%eth0',
    'febf:ffff::1',
    'fec0::1',
    'fc00::1',
    'fd00:ec2::254',
    'FD12:3456:789a::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::FFFF:7F00:0001',
    '0:0:0:0:0:ffff:a9fe:a9fe',
    '::ffff:10.0.0.1',
    '::127.0.0.1',
    '::a00:1',
    '64:ff9b::127.0.0.1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b:1::1',
    '2002:7f00:1::',
    '2002:a9fe:a9fe::1',
    '2002:c0a8:101:0:0:0:0:1',
    'localhost',
    'example.com',
    '',
    '127.1',
    '2130706433',
    '0x7f000001',
    '1.2.3.4.5',
    ':::1',
  ])('refuses %s', (address) => {
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
    '169.253.255.255',
    '172.15.255.255',
    '172.32.0.1',
    '192.0.1.1',
    '192.167.255.255',
    '198.17.255.255',
    '198.20.0.1',
    '223.255.255.255',
    '2606:4700::1111',
    '2606:4700:4700::1111',
    '2001:4860:4860::8888',
    '2a00:1450:4001:82b::200e',
    '[2606:4700::1111]',
    '::ffff:8.8.8.8',
    '::ffff:5db8:d822',
    '64:ff9b::8.8.8.8',
    '2002:808:808::1',
    'fe7f:ffff::1',
    'fbff::1',
    'fe00::1',
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
