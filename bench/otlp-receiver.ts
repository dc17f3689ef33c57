// An OTLP/HTTP collector for `npm run bench`'s service-traced target, in a process of its own:
// it takes the SDK's default encoding (protobuf) at /v1/traces, answers 200 at once and counts
// the spans it got, which its parent reads over IPC ('report'). It walks the protobuf's fields
// rather than decoding them: ExportTraceServiceRequest.resource_spans (1) > ResourceSpans.
// scope_spans (2) > ScopeSpans.spans (2) is all it needs.
import { createServer } from 'node:http';

let requests = 0;
let spans = 0;

/** Calls `onField` with each length-delimited field of `message`; skips the others. */
function eachField(
  message: Buffer,
  onField: (field: number, value: Buffer) => void,
  start = 0,
  end = message.length,
): void {
  let at = start;
  const varint = () => {
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = message[at++] ?? 0;
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) return value;
      shift += 7;
    }
  };
  while (at < end) {
    const key = varint();
    const wireType = key & 7;
    if (wireType === 0) varint();
    else if (wireType === 1) at += 8;
    else if (wireType === 5) at += 4;
    else if (wireType === 2) {
      const length = varint();
      onField(Math.floor(key / 8), message.subarray(at, at + length));
      at += length;
    } else throw new Error(`unexpected wire type ${wireType}`);
  }
}

function countSpans(body: Buffer): number {
  let count = 0;
  eachField(body, (field, resourceSpans) => {
    if (field !== 1) return;
    eachField(resourceSpans, (field, scopeSpans) => {
      if (field !== 2) return;
      eachField(scopeSpans, (field) => {
        if (field === 2) count++;
      });
    });
  });
  return count;
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    requests++;
    if (req.url === '/v1/traces') spans += countSpans(Buffer.concat(chunks));
    res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  process.send?.({ port: address.port });
});
process.on('message', (message) => {
  if (message === 'report') process.send?.({ requests, spans });
});
process.on('disconnect', () => process.exit(0));
