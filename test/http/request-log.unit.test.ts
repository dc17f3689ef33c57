import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { RequestLog } from '../../src/http/request-log.js';
import { createLogger, isoTimeNow } from '../../src/logger.js';

/** An app logging as the service does, its lines kept; every request gets the id `requestId`. */
async function loggingApp(level: string, requestId: string) {
  const lines: string[] = [];
  const logger = createLogger(level, { write: (line: string) => lines.push(line) });
  const app = Fastify({
    loggerInstance: logger,
    logController: new RequestLog(),
    genReqId: () => requestId,
  });
  app.get('/plain/*', async () => ({ ok: true }));
  app.get('/warns', async (request) => {
    request.log.warn({ detail: 1 }, 'careful');
    return { ok: true };
  });
  app.get('/quiet', async (request) => {
    request.log.level = 'warn';
    return { ok: true };
  });
  app.get('/verbose', async (request) => {
    request.log.level = 'info';
    return { ok: true };
  });
  app.get('/traced', async (request, reply) => {
    // As tracing does: the request's logger is replaced by a child with more bindings.
    request.log = request.log.child({ trace_id: 'abc' });
    reply.log = request.log;
    return { ok: true };
  });
  await app.ready();
  return { app, lines };
}

/** The line pino itself writes for a request, with time and duration made comparable. */
function pinoLine(requestId: string, fields: Record<string, unknown>): string {
  const lines: string[] = [];
  createLogger('info', { write: (line: string) => lines.push(line) })
    .child({ reqId: requestId })
    .info(fields, 'request completed');
  return comparable(lines[0] ?? '');
}

const comparable = (line: string) =>
  line.replace(/"time":"[^"]+"/, '"time":"T"').replace(/"durationMs":[0-9.e-]+/, '"durationMs":0');

describe('the request log line', () => {
  it.each([
    ['/plain/x', 'a-request-id'],
    ['/plain/%22quoted%22?q=%5C&tag=caf%C3%A9', 'id"with\\quote'],
    ['/plain/x?q=\\&tag=\\u2028', '~!@#$%^&*()_+{}|:<>?'],
  ])('is the line pino writes, byte for byte: %s', async (url, requestId) => {
    const { app, lines } = await loggingApp('info', requestId);
    const response = await app.inject({ method: 'GET', url });
    expect(response.statusCode).toBe(200);
    expect(lines).toHaveLength(1);
    const written = JSON.parse(lines[0] ?? '');
    expect(written).toMatchObject({ level: 'info', reqId: requestId, url, route: '/plain/*' });
    expect(comparable(lines[0] ?? '')).toBe(
      pinoLine(requestId, {
        method: 'GET',
        url,
        route: '/plain/*',
        statusCode: 200,
        durationMs: 0,
      }),
    );
  });

  it('leaves out the route of a request that matched none, as pino does', async () => {
    const { app, lines } = await loggingApp('info', 'r1');
    await app.inject({ method: 'GET', url: '/nowhere' });
    expect(comparable(lines.at(-1) ?? '')).toBe(
      pinoLine('r1', { method: 'GET', url: '/nowhere', statusCode: 404, durationMs: 0 }),
    );
  });

  it('is not written when the level is above info', async () => {
    const { app, lines } = await loggingApp('warn', 'r2');
    await app.inject({ method: 'GET', url: '/warns' });
    expect(lines.map((line) => JSON.parse(line))).toEqual([
      expect.objectContaining({ level: 'warn', reqId: 'r2', detail: 1, msg: 'careful' }),
    ]);
  });

  it("follows the request's own level, not the app's", async () => {
    const quiet = await loggingApp('info', 'r5');
    await quiet.app.inject({ method: 'GET', url: '/quiet' });
    expect(quiet.lines).toEqual([]);
    const verbose = await loggingApp('warn', 'r6');
    await verbose.app.inject({ method: 'GET', url: '/verbose' });
    expect(verbose.lines.map((line) => JSON.parse(line))).toEqual([
      expect.objectContaining({ level: 'info', reqId: 'r6', url: '/verbose', statusCode: 200 }),
    ]);
  });

  it("carries the bindings of a logger that replaced the request's own", async () => {
    const { app, lines } = await loggingApp('info', 'r3');
    await app.inject({ method: 'GET', url: '/traced' });
    expect(JSON.parse(lines.at(-1) ?? '')).toMatchObject({
      reqId: 'r3',
      trace_id: 'abc',
      msg: 'request completed',
    });
  });

  it('binds the request id to the lines a request logs itself', async () => {
    const { app, lines } = await loggingApp('info', 'r4');
    await app.inject({ method: 'GET', url: '/warns' });
    expect(lines.map((line) => JSON.parse(line))).toMatchObject([
      { level: 'warn', reqId: 'r4', msg: 'careful' },
      { level: 'info', reqId: 'r4', msg: 'request completed' },
    ]);
  });
});

describe('isoTimeNow', () => {
  it('writes the time as Date.prototype.toISOString does', () => {
    const times = [0, 1, 9, 10, 99, 100, 999, 1000, 59_999, 1_732_400_000_000, Date.now()];
    for (let i = 0; i < 2000; i++) times.push(Math.floor(Math.random() * 253_402_300_799_999));
    for (const time of times) expect(isoTimeNow(time)).toBe(new Date(time).toISOString());
  });
});
