import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { formatPosition, parsePosition } from '../db/wal-position.js';
import { HttpError } from '../http/errors.js';
import type { Consistency } from './routed-reads.js';

/** The header a write's and a read's answer carry, and a read may send back. */
export const CONSISTENCY_TOKEN = 'consistency-token';

export const MALFORMED_TOKEN_MESSAGE =
  'headers/consistency-token must be a Consistency-Token this service answered, sent back unchanged';

const described = {
  description:
    'When the service reads from replicas: where the store stood after this answer. Send the newest one held with every read (opaque, at most 128 printable ASCII characters).',
};

/** The response header, for the document. */
export const tokenResponseHeader = {
  [CONSISTENCY_TOKEN]: Type.String({ ...described, maxLength: 128 }),
};

/** The request header, for the document. */
export const tokenRequestHeader = {
  [CONSISTENCY_TOKEN]: {
    description:
      'A Consistency-Token this service answered: the read sees every write it covers (read-your-writes across replicas). Malformed: 400. Ignored when the service reads from no replica.',
    schema: { type: 'string', maxLength: 128 },
  },
};

/** What the request has seen: the position its Consistency-Token names, if it sent one. */
export function readConsistencyToken(request: FastifyRequest): Consistency {
  const sent = request.headers[CONSISTENCY_TOKEN];
  if (sent === undefined) return { position: undefined };
  const position = typeof sent === 'string' ? parsePosition(sent) : undefined;
  if (position === undefined) throw new HttpError(400, MALFORMED_TOKEN_MESSAGE);
  return { position };
}

const noHeaders: Readonly<Record<string, string>> = Object.freeze({});

/** The answer's Consistency-Token header, when the request has a position to give. */
export function tokenHeaders(
  consistency: Consistency | undefined,
): Readonly<Record<string, string>> {
  const position = consistency?.position;
  return position === undefined ? noHeaders : { [CONSISTENCY_TOKEN]: formatPosition(position) };
}

/** Sets the answer's Consistency-Token, when the request has a position to give. */
export function answerToken(reply: FastifyReply, consistency: Consistency | undefined): void {
  const position = consistency?.position;
  if (position !== undefined) reply.header(CONSISTENCY_TOKEN, formatPosition(position));
}
