import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';

/** A signing secret for the tests, as an operator would configure it. */
export const WEBHOOK_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Date.now() when the whole request had arrived. */
  at: number;
  /** The signature checks out with an independent Standard Webhooks implementation. */
  verified: boolean;
}

export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Answer only after this long (a slow or hanging receiver). */
  delayMs?: number;
}

export interface Receiver {
  /** The URL to subscribe, on 127.0.0.1. */
  url: string;
  port: number;
  requests: ReceivedRequest[];
  /** Resolves once `count` requests have arrived; rejects after `withinMs`. */
  waitFor(count: number, withinMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

/**
 * A webhook receiver on loopback that answers each request with `answer(request, n)` (n counts
 * from 0) and checks every signature against `secret` with the `standardwebhooks` package, as a
 * subscriber would.
 */
export async function startReceiver(
  answer: (request: ReceivedRequest, n: number) => Answer = () => ({ status: 200 }),
  {
    port = 0,
    path = '/hook',
    secret = WEBHOOK_SECRET,
  }: { port?: number; path?: string; secret?: string } = {},
): Promise<Receiver> {
  const verifier = new Webhook(secret);
  const requests: ReceivedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let verified = false;
      try {
        verifier.verify(body, req.headers as Record<string, string>);
        verified = true;
      } catch {}
      const request: ReceivedRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body,
        at: Date.now(),
        verified,
      };
      const reply = answer(request, requests.length);
      requests.push(request);
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(reply.status, reply.headers).end(reply.body ?? '');
      };
      if (reply.delayMs) setTimeout(send, reply.delayMs).unref();
      else send();
    });
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return {
    url: `http://127.0.0.1:${address.port}${path}`,
    port: address.port,
    requests,
    async waitFor(count, withinMs = 15_000) {
      const deadline = Date.now() + withinMs;
      while (requests.length < count) {
        if (Date.now() > deadline) {
          throw new Error(
            `the receiver got ${requests.length} of ${count} requests in ${withinMs} ms`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return requests;
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
