// The webhook receivers of the soak suite, in a process of its own: one port, one receiver per
// path (/receivers/<n>), each behaving as its parent last told it over IPC ({ behaviours }),
// well or badly. Like bench/receiver.ts, a bare HTTP/1.1 parser on node:net: the receivers
// should take as little of the shared cores as they can. It counts the requests each behaviour
// got ('report').
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
const requests: Partial<Record<Behaviour, number>> = {};

function behaviourOf(head: string): Behaviour {
  const match = /^POST \/receivers\/(\d+)/.exec(head);
  return behaviours[Number(match?.[1] ?? -1)] ?? 'ok';
}

function respond(socket: Socket, behaviour: Behaviour): void {
  if (behaviour === 'ok') socket.write(OK);
  else if (behaviour === 'error') socket.write(ERROR);
  else if (behaviour === 'throttle') socket.write(THROTTLE);
  else if (behaviour === 'slow') {
    setTimeout(() => {
      if (!socket.destroyed) socket.write(OK);
    }, slowMs);
  } else if (behaviour === 'reset') socket.resetAndDestroy();
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
      pending = pending.subarray(bodyStart + length);
      const behaviour = behaviourOf(head);
      requests[behaviour] = (requests[behaviour] ?? 0) + 1;
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
process.on('message', (message: 'report' | { behaviours: Behaviour[]; slowMs: number }) => {
  if (message === 'report') process.send?.({ requests });
  else {
    ({ behaviours, slowMs } = message);
    process.send?.({ behaviours });
  }
});
process.on('disconnect', () => process.exit(0));
