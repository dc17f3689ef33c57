// The floor target: bare Fastify answering POST /plants with the shapes of the service's
// schemas (NewPlant in, Plant out) written in plain TypeBox, a plain bearer check, no database,
// no logging, no metrics, no extra headers. What this process spends per request is the least
// any Fastify service with these schemas can spend on this machine; the service's CPU per
// create is judged against it.
//
// Configured by PORT, HOST and API_TOKENS (the first token is the one accepted).
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';

// The service's NewPlant and Plant, in the types Fastify's own JSON parser and validator know
// (the service's int64 id is a bigint its own parser makes; here it is a JSON integer).
const NewPlant = Type.Object({
  id: Type.Integer(),
  name: Type.String({ minLength: 1, maxLength: 256 }),
  tag: Type.Optional(Type.String({ minLength: 0, maxLength: 256 })),
});
const Plant = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 256 }),
  tag: Type.Optional(Type.String({ minLength: 0, maxLength: 256 })),
});
const ErrorBody = Type.Object({ error: Type.Integer(), message: Type.String() });

const token = (process.env.API_TOKENS ?? '').split(',')[0]?.trim() ?? '';
if (token === '') {
  process.stderr.write('floor: API_TOKENS must name a token\n');
  process.exit(1);
}
const expected = `Bearer ${token}`;

const app = Fastify({ logger: false }).withTypeProvider<TypeBoxTypeProvider>();

async function requireToken(request: FastifyRequest, reply: FastifyReply) {
  if (request.headers.authorization !== expected) {
    return reply.code(401).send({ error: 401, message: 'the bearer token is not valid' });
  }
}

app.post(
  '/plants',
  { onRequest: requireToken, schema: { body: NewPlant, response: { 200: Plant, 401: ErrorBody } } },
  async (request) => {
    const { name, tag } = request.body;
    return tag === undefined ? { name } : { name, tag };
  },
);

// The harness asks before it loads; the service answers the same path.
app.get('/readyz', async () => ({ status: 'ready' }));

async function stop(): Promise<void> {
  await app.close();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

const host = process.env.HOST ?? '127.0.0.1';
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host });
// The line the harness waits for, in the shape of the service's own log line.
process.stdout.write(`${JSON.stringify({ msg: `Server listening at ${address}` })}\n`);
