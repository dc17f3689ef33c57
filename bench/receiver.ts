// A webhook receiver for `npm run bench`, in a process of its own: it answers every delivery
// 200 at once and notes when the first delivery of each plant arrived and how many arrived; its
// parent reads the notes over IPC ('report', or 'count' for the number of requests alone). A
// bare HTTP/1.1 parser on node:net rather than node:http: on a real deployment the receiver runs
// elsewhere, so here it should take as little of the shared cores as it can. It does not verify signatures, which the tests do.
import { createServer } from 'node:net';

/** Per plant id: when its first delivery arrived, and how many did (one per subscriber). */
const arrivals = new Map<string, [number, number]>();
let requests = 0;
const OK = Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

const server = createServer((socket) => {
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let answers = 0;
    for (;;) {
      const end = pending.indexOf(HEADERS_END);
      if (end === -1) break;
      const head = pending.subarray(0, end).toString('latin1');
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      const bodyStart = end + HEADERS_END.length;
      if (pending.length < bodyStart + length) break;
      const body = pending.subarray(bodyStart, bodyStart + length).toString('utf8');
      pending = pending.subarray(bodyStart + length);
      requests++;
      answers++;
      // The body starts {"id":<digits>, as the service writes it.
      const id = body.slice(6, body.indexOf(','));
      const seen = arrivals.get(id);
      if (seen === undefined) arrivals.set(id, [Date.now(), 1]);
      else seen[1]++;
    }
    if (answers === 1) socket.write(OK);
    else if (answers > 1) socket.write(Buffer.concat(Array.from({ length: answers }, () => OK)));
  });
  socket.on('error', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  process.send?.({ port: address.port });
});
process.on('message', (message) => {
  if (message === 'count') process.send?.({ requests });
  if (message === 'report') {
    process.send?.({
      requests,
      arrivals: [...arrivals].map(([id, [first, count]]) => [id, first, count]),
    });
  }
});
process.on('disconnect', () => process.exit(0));
