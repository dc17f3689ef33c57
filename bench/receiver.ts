// The webhook receivers of `npm run bench`, in a process of its own: one port, a receiver per
// path ending in /<n>, each answering as its parent last told it over IPC ({ behaviours }: 200
// unless told otherwise). It notes when each plant's first delivery arrived and how many did
// ('report'; 'count' for the number of requests alone). A bare HTTP/1.1 parser on node:net
// rather than node:http: on a real deployment receivers run elsewhere, so here they should take
// as little of the shared cores as they can. Signatures are the tests' business, not this one's.
import { createServer, type Socket } from 'node:net';
import type { Behaviour } from './soak-load.js';

const answer = (status: string, headers = '') =>
  Buffer.from(`HTTP/1.1 ${status}\r\ncontent-length: 0\r\n${headers}\r\n`);
const OK = answer('200 OK');
const ERROR = answer('500 Internal Server Error');
const THROTTLE = answer('429 Too Many Requests', 'retry-after: 1\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

let behaviours: Behaviour[] = [];
/** How long a slow receiver takes to answer. */
let slowMs = 0;
let requests = 0;
const byBehaviour: Partial<Record<Behaviour, number>> = {};
/** Per plant id: when its first delivery arrived, and how many did (one per subscriber). */
const arrivals = new Map<string, [number, number]>();

function respond(socket: Socket, behaviour: Behaviour): void {
  if (behaviour === 'ok') socket.write(OK);
  else if (behaviour === 'error') socket.write(ERROR);
  else if (behaviour === 'throttle') socket.write(THROTTLE);
  else if (behaviour === 'slow') setTimeout(() => socket.destroyed || socket.write(OK), slowMs);
  else if (behaviour === 'reset') socket.resetAndDestroy();
  // hang: nothing, ever.
}

const server = createServer((socket) => {
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      if (socket.destroyed) return;
      const end = pending.indexOf(HEADERS_END);
      if (end === -1) break;
      const head = pending.subarray(0, end).toString('latin1');
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      const bodyStart = end + HEADERS_END.length;
      if (pending.length < bodyStart + length) break;
      const body = pending.subarray(bodyStart, bodyStart + length).toString('utf8');
      pending = pending.subarray(bodyStart + length);
      requests++;
      // The body starts {"id":<digits>, as the service writes it.
      const id = body.slice(6, body.indexOf(','));
      const seen = arrivals.get(id);
      if (seen === undefined) arrivals.set(id, [Date.now(), 1]);
      else seen[1]++;
      const behaviour = behaviours[Number(/\/(\d+) HTTP/.exec(head)?.[1] ?? -1)] ?? 'ok';
      byBehaviour[behaviour] = (byBehaviour[behaviour] ?? 0) + 1;
      respond(socket, behaviour);
    }
  });
  socket.on('error', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  process.send?.({ port: address.port });
});
process.on(
  'message',
  (message: 'count' | 'report' | { behaviours: Behaviour[]; slowMs: number }) => {
    if (message === 'count') process.send?.({ requests });
    else if (message === 'report') {
      const firsts = [...arrivals].map(([id, [first, count]]) => [id, first, count]);
      process.send?.({ requests, byBehaviour, arrivals: firsts });
    } else {
      ({ behaviours, slowMs } = message);
      process.send?.({ requests });
    }
  },
);
process.on('disconnect', () => process.exit(0));
