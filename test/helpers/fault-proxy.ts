import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a database that can turn into a black hole: connections, old and new,
 * stay open and every byte is accepted, but nothing reaches the other side and nothing comes back,
 * as when a network drops packets or a server hangs. `forward()` heals it: what was held is
 * delivered late, in order, as TCP would once the network is back.
 */
export interface FaultProxy {
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  via(url: string): string;
  /** From now on nothing passes, in either direction, on any connection. */
  blackhole(): void;
  /** Bytes pass again; held ones first. */
  forward(): void;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

interface Direction {
  to: () => Socket | undefined;
  held: Buffer[];
  /** The sender closed its side; pass the close on once the held bytes are delivered. */
  ended: boolean;
}

export async function startFaultProxy(
  target: { host: string; port: number },
  initially: 'forward' | 'blackhole' = 'forward',
): Promise<FaultProxy> {
  let passing = initially === 'forward';
  let accepted = 0;
  const links = new Set<{ flush: () => void; destroy: () => void }>();

  const server = createServer((client) => {
    accepted++;
    let upstream: Socket | undefined;
    const up: Direction = { to: () => upstream, held: [], ended: false };
    const down: Direction = { to: () => client, held: [], ended: false };

    const deliver = (direction: Direction) => {
      const to = direction.to();
      if (!passing || !to || to.destroyed) return;
      for (const chunk of direction.held) to.write(chunk);
      direction.held = [];
      if (direction.ended) to.end();
    };
    const link = {
      flush() {
        if (!passing) return;
        if (!upstream) {
          upstream = connect(target.port, target.host, () => deliver(up));
          upstream.on('data', (chunk) => {
            down.held.push(chunk);
            deliver(down);
          });
          upstream.on('end', () => {
            down.ended = true;
            deliver(down);
          });
          upstream.on('error', () => client.destroy());
          upstream.on('close', () => {
            if (!passing) return;
            client.destroy();
            links.delete(link);
          });
          return;
        }
        if (upstream.connecting) return;
        deliver(up);
        deliver(down);
      },
      destroy() {
        client.destroy();
        upstream?.destroy();
      },
    };
    links.add(link);
    client.on('data', (chunk) => {
      up.held.push(chunk);
      if (upstream && !upstream.connecting) deliver(up);
    });
    client.on('end', () => {
      up.ended = true;
      if (upstream && !upstream.connecting) deliver(up);
    });
    // A client that gives up while nothing passes: the server hears of it once the network heals.
    client.on('error', () => {});
    client.on('close', () => {
      up.ended = true;
      if (passing) {
        upstream?.destroy();
        links.delete(link);
      }
    });
    link.flush();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');

  return {
    port: address.port,
    via(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(address.port);
      return parsed.toString();
    },
    blackhole() {
      passing = false;
    },
    forward() {
      passing = true;
      for (const link of links) link.flush();
    },
    accepted: () => accepted,
    async close() {
      for (const link of links) link.destroy();
      links.clear();
      server.close();
      await once(server, 'close');
    },
  };
}
