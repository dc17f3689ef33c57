import { connect, type Socket } from 'node:net';

/** One answer as it came over the wire. */
export interface RawResponse {
  /** `HTTP/1.1 400 Bad Request` */
  statusLine: string;
  status: number;
  /** Header names in lower case; a repeated header appears once, its values joined by ", ". */
  headers: Record<string, string>;
  body: string;
}

/**
 * A client connection that writes bytes exactly as given and reads the answers as they come,
 * framed by Content-Length or chunked coding, so that a test sees everything the server wrote,
 * including an answer it should not have written.
 */
export class RawClient {
  private received = Buffer.alloc(0);
  private closedAt: number | undefined;
  private readonly waiters = new Set<() => void>();

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.received = Buffer.concat([this.received, chunk]);
      this.wake();
    });
    socket.on('close', () => {
      this.closedAt = Date.now();
      this.wake();
    });
    // A reset after the server's answer is a way of closing, not a failure of the test.
    socket.on('error', () => {});
  }

  static async connect(port: number): Promise<RawClient> {
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new RawClient(socket);
  }

  write(bytes: string | Buffer): void {
    this.socket.write(bytes);
  }

  /** Every whole answer received so far. */
  responses(): RawResponse[] {
    return parseResponses(this.received);
  }

  /** Everything received so far, as text. */
  text(): string {
    return this.received.toString('utf8');
  }

  get closed(): boolean {
    return this.closedAt !== undefined;
  }

  /** Resolves with the answers once `count` have arrived; rejects after `withinMs`. */
  async waitForResponses(count: number, withinMs = 5000): Promise<RawResponse[]> {
    await this.until(() => this.responses().length >= count, withinMs, `${count} answers`);
    return this.responses();
  }

  /** Resolves true once the server has closed the connection, false if it is open after `ms`. */
  async closesWithin(ms: number): Promise<boolean> {
    try {
      await this.until(() => this.closed, ms, 'the connection to close');
      return true;
    } catch {
      return false;
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    for (const waiter of this.waiters) waiter();
  }

  private until(done: () => boolean, withinMs: number, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (done()) finish(resolve);
        else if (this.closed)
          finish(() => reject(new Error(`closed before ${what}: ${this.text()}`)));
      };
      const timer = setTimeout(
        () => finish(() => reject(new Error(`no ${what} within ${withinMs} ms: ${this.text()}`))),
        withinMs,
      );
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        settle();
      };
      this.waiters.add(check);
      check();
    });
  }
}

/**
 * Sends `bytes` on a new connection, then collects what the server writes until it closes the
 * connection or `openMs` passes: `closed` tells which.
 */
export async function sendRaw(
  port: number,
  bytes: string | Buffer,
  openMs = 5000,
): Promise<{ responses: RawResponse[]; closed: boolean; text: string }> {
  const client = await RawClient.connect(port);
  client.write(bytes);
  const closed = await client.closesWithin(openMs);
  client.destroy();
  return { responses: client.responses(), closed, text: client.text() };
}

function parseResponses(data: Buffer): RawResponse[] {
  const responses: RawResponse[] = [];
  let at = 0;
  for (;;) {
    const headEnd = data.indexOf('\r\n\r\n', at);
    if (headEnd < 0) return responses;
    const [statusLine = '', ...lines] = data.toString('latin1', at, headEnd).split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
    }
    const status = Number(statusLine.split(' ')[1]);
    let bodyStart = headEnd + 4;
    let body: Buffer = Buffer.alloc(0);
    if (status >= 200 && headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const sizeEnd = data.indexOf('\r\n', bodyStart);
        if (sizeEnd < 0) return responses;
        const size = Number.parseInt(data.toString('latin1', bodyStart, sizeEnd), 16);
        const chunkEnd = sizeEnd + 2 + size;
        if (data.length < chunkEnd + 2) return responses;
        body = Buffer.concat([body, data.subarray(sizeEnd + 2, chunkEnd)]);
        bodyStart = chunkEnd + 2;
        if (size === 0) break;
      }
    } else if (status >= 200) {
      const length = Number(headers['content-length'] ?? 0);
      if (data.length < bodyStart + length) return responses;
      body = data.subarray(bodyStart, bodyStart + length);
      bodyStart += length;
    }
    responses.push({ statusLine, status, headers, body: body.toString('utf8') });
    at = bodyStart;
  }
}
