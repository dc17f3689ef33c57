import type { FastifyRequest } from 'fastify';
import { HttpError } from '../../http/errors.js';
import { asText, parseLimit, queryStringOf, readQueryParameters } from '../../http/query.js';
import { INT64_MAX } from '../../kinds.js';
import {
  attemptIdOf,
  attemptKeyOf,
  endpointIdOf,
  endpointKeyOf,
  eventUuidOf,
} from '../tables/ids.js';
import {
  MALFORMED_ENDPOINT_ID_MESSAGE,
  NO_ENDPOINT_MESSAGE,
  secretByPatchMessage,
  UNKNOWN_EVENT_MESSAGE,
} from './messages.js';
import {
  EndpointPatchSchema,
  EndpointSchema,
  PAGE_LIMIT_DEFAULT,
  PAGE_LIMIT_MAX,
} from './schemas.js';

/** The path and query parameters of the management API, read and checked. */

export const notFound = () => new HttpError(404, NO_ENDPOINT_MESSAGE);

/** A path id that is not of the form of endpoint ids: 404 as for an unknown one, saying the form. */
export const malformedEndpointId = () => new HttpError(404, MALFORMED_ENDPOINT_ID_MESSAGE);

/** The row key an `ep_` id names; undefined for anything else, which names no endpoint. */
export function endpointKey(id: string): bigint | undefined {
  const key = endpointKeyOf(id);
  return key !== undefined && key >= 1n && key <= INT64_MAX ? key : undefined;
}

/** A path id that is not an endpoint's names none: 404, as for one that was deleted. */
export async function readEndpointId(request: FastifyRequest): Promise<void> {
  const { id } = request.params as { id: string };
  if (endpointKeyOf(id) === undefined) throw malformedEndpointId();
  if (endpointKey(id) === undefined) throw notFound();
}

export const unknownEvent = () => new HttpError(404, UNKNOWN_EVENT_MESSAGE);

/** An event id that is no `webhook-id` of an event names none: 404 (a test's is not one). */
export async function readEventId(request: FastifyRequest): Promise<void> {
  const { eventId } = request.params as { eventId: string };
  if (eventUuidOf(eventId) === undefined) throw unknownEvent();
}

export const keyOfRequest = (request: { params: { id: string } }) =>
  endpointKey(request.params.id) ?? 0n;

/** An absent body is an empty object: `POST .../rotate` needs none. */
export async function bodyOrEmpty(request: FastifyRequest): Promise<void> {
  request.body ??= {};
}

/** The query of a page, once its other parameters are checked: `limit` read, the rest as given. */
function pageQuery(limit: string | undefined, others: Record<string, string | undefined>) {
  return {
    ...(limit !== undefined && {
      limit: parseLimit(limit, PAGE_LIMIT_MAX, PAGE_LIMIT_DEFAULT, 'querystring/limit'),
    }),
    ...Object.fromEntries(Object.entries(others).filter(([, value]) => value !== undefined)),
  };
}

export async function readEndpointPage(request: FastifyRequest): Promise<void> {
  const { limit, after } = readQueryParameters(queryStringOf(request.url), {
    limit: asText,
    after: asText,
  });
  if (after !== undefined && endpointKey(after) === undefined) {
    throw new HttpError(
      400,
      `querystring/after must be an endpoint id, such as ${endpointIdOf(1n)}`,
    );
  }
  request.query = pageQuery(limit, { after });
}

export async function readAttemptPage(request: FastifyRequest): Promise<void> {
  const query = queryStringOf(request.url);
  const { limit, after, status } = readQueryParameters(query, {
    limit: asText,
    after: asText,
    status: asText,
  });
  const afterKey = after === undefined ? undefined : attemptKeyOf(after);
  if (after !== undefined && (afterKey === undefined || afterKey > INT64_MAX)) {
    throw new HttpError(400, `querystring/after must be an attempt id, such as ${attemptIdOf(1n)}`);
  }
  if (status !== undefined && status !== 'succeeded' && status !== 'failed') {
    throw new HttpError(400, 'querystring/status must be succeeded or failed');
  }
  request.query = pageQuery(limit, { after, status });
}

/** Fields of an endpoint that only the service sets: those a PATCH body does not have. */
const SET_BY_THE_SERVICE = Object.keys(EndpointSchema.properties).filter(
  (name) => !Object.hasOwn(EndpointPatchSchema.properties, name),
);

/**
 * A field of a PATCH body that the resource has, or that another operation changes, but that
 * PATCH does not: 400 saying where to go, rather than a 200 that changed nothing. Unknown fields
 * are still ignored.
 */
export function unpatchableField(body: object, id: string): HttpError | undefined {
  if (Object.hasOwn(body, 'secret')) {
    return new HttpError(400, secretByPatchMessage(id));
  }
  if (Object.hasOwn(body, 'headers')) {
    return new HttpError(
      400,
      `body/headers cannot be set by PATCH: PUT /webhooks/endpoints/${id}/headers sets them`,
    );
  }
  const field = SET_BY_THE_SERVICE.find((name) => Object.hasOwn(body, name));
  return field === undefined
    ? undefined
    : new HttpError(400, `body/${field} is set by the service and cannot be changed`);
}

/** Custom headers in a create's body: 400, since only PUT .../headers sets them. */
export function headersOnCreate(body: object): HttpError | undefined {
  return Object.hasOwn(body, 'headers')
    ? new HttpError(
        400,
        'body/headers cannot be set when creating an endpoint: PUT /webhooks/endpoints/{id}/headers sets them once it exists',
      )
    : undefined;
}
