import { CONSISTENCY_TOKEN, newerToken } from './consistency-token.js';
import { quoteUnsafeIntegers, stringifyExact } from './exact-json.js';
import { type Client, createClient, createConfig } from './generated/client/index.js';
import { addPlant, deletePlant, getPlant, listPlants } from './generated/sdk.gen.js';
import { listPlantsResponseTransformer } from './generated/transformers.gen.js';
import type {
  Error as ErrorBody,
  ListPlantsData,
  ListPlantsErrors,
  ListPlantsResponses,
  NewPlant,
  Plant,
  StoredPlant,
} from './generated/types.gen.js';

export type { ErrorBody };

export interface PlantStoreOptions {
  /** Where the service answers, e.g. `https://plants.example.com` (a path prefix is kept). */
  baseUrl: string;
  /** One of the service's API_TOKENS. */
  token: string;
  /** The fetch that sends the requests; the global one unless given. */
  fetch?: typeof fetch;
  /**
   * A `Consistency-Token` to start with, such as the `consistencyToken` of a client in another
   * process: the first reads see every write it covers.
   */
  consistencyToken?: string;
}

/** The answer of the service to a request that failed: any status that is not 2xx. */
export class PlantStoreError extends Error {
  override readonly name = 'PlantStoreError';
  /** The HTTP status code. */
  readonly status: number;
  /** The `Error` body: `{ error, message }`. */
  readonly body: ErrorBody;
  /** The response headers (`retry-after`, `www-authenticate`, `x-request-id`...). */
  readonly headers: Headers;

  constructor(status: number, body: ErrorBody, headers: Headers) {
    super(body.message);
    this.status = status;
    this.body = body;
    this.headers = headers;
  }

  /** The request id the service logged this request under. */
  get requestId(): string | undefined {
    return this.headers.get('x-request-id') ?? undefined;
  }
}

export type PlantQuery = NonNullable<ListPlantsData['query']>;

export interface PlantPage {
  plants: StoredPlant[];
  /** The next page, from the `Link: <...>; rel="next"` header; undefined on the last page. */
  next: URL | undefined;
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== 'object' || value === null) return false;
  const { error, message } = value as Record<string, unknown>;
  return typeof error === 'number' && typeof message === 'string';
}

/**
 * `value` when it is a bigint. Anything else is refused, a safe integer too, so that an id is
 * never sent rounded: a number above 2^53 has lost its digits before it reaches the client.
 */
function bigintId(value: unknown, name: string): bigint {
  if (typeof value === 'bigint') return value;
  const shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
  throw new TypeError(`${name} must be a bigint, such as 42n; got the ${typeof value} ${shown}`);
}

/** True for the reads that take a `Consistency-Token`: GET and HEAD of /plants and /plants/{id}. */
function takesToken(request: Request): boolean {
  if (request.method !== 'GET' && request.method !== 'HEAD') return false;
  return /\/plants(?:\/[^/]+)?$/.test(new URL(request.url).pathname);
}

/** The target of the `rel="next"` link of `response`, resolved against the URL it answered. */
function nextLink(response: Response, request: Request): URL | undefined {
  const header = response.headers.get('link');
  if (!header) return undefined;
  for (const [, target, parameters] of header.matchAll(/<([^>]*)>([^,]*)/g)) {
    const rel = /;\s*rel\s*=\s*"?([^";]*)"?/i.exec(parameters ?? '')?.[1];
    if (target === undefined || !rel?.toLowerCase().split(/\s+/).includes('next')) continue;
    const next = new URL(target, request.url);
    // Following it sends the token: never to another origin than the one asked.
    if (next.origin !== new URL(request.url).origin) {
      throw new Error(`GET /plants linked its next page to another origin: ${next.origin}`);
    }
    return next;
  }
  return undefined;
}

/**
 * A client of the Plant Store API. Ids are `bigint` both ways and exact over the whole int64
 * range (an id of another type is a TypeError); every answer that is not 2xx is thrown as a
 * PlantStoreError.
 */
export class PlantStore {
  /** The generated client, for the operations of `./generated/sdk.gen.js` that are not here. */
  readonly client: Client;
  #consistencyToken: string | undefined;

  constructor(options: PlantStoreOptions) {
    this.#consistencyToken = options.consistencyToken;
    this.client = createClient(
      createConfig({
        baseUrl: options.baseUrl,
        auth: options.token,
        bodySerializer: stringifyExact,
        throwOnError: true,
        ...(options.fetch && { fetch: options.fetch }),
      }),
    );
    this.client.interceptors.request.use((request) => {
      const token = this.#consistencyToken;
      // A token the caller put on the request itself is theirs to send.
      if (token !== undefined && takesToken(request) && !request.headers.has(CONSISTENCY_TOKEN)) {
        request.headers.set(CONSISTENCY_TOKEN, token);
      }
      return request;
    });
    this.client.interceptors.response.use((response) => {
      const token = response.headers.get(CONSISTENCY_TOKEN);
      if (token !== null) this.#consistencyToken = newerToken(this.#consistencyToken, token);
      return response;
    });
    this.client.interceptors.response.use(async (response) => {
      if (!response.ok || !response.headers.get('content-type')?.includes('json')) return response;
      const text = await response.text();
      const headers = new Headers(response.headers);
      headers.delete('content-length');
      return new Response(text && quoteUnsafeIntegers(text), {
        status: response.status,
        statusText: response.statusText,
        headers,
      });
    });
    this.client.interceptors.error.use((error, response) => {
      if (!response || response.ok) return error;
      const body = isErrorBody(error)
        ? error
        : { error: response.status, message: `The service answered ${response.status}.` };
      return new PlantStoreError(response.status, body, response.headers);
    });
  }

  /**
   * The newest `Consistency-Token` the service has answered this client (or the one it was given
   * to start with), which every read sends; undefined while there is none. Hand it to a client in
   * another process (`consistencyToken` option) for its reads to see this one's writes.
   */
  get consistencyToken(): string | undefined {
    return this.#consistencyToken;
  }

  /** Creates a plant; sent again with the same content, answers the stored plant again. */
  async createPlant(plant: NewPlant): Promise<Plant> {
    bigintId(plant.id, 'plant.id');
    const { data } = await addPlant({ client: this.client, body: plant, throwOnError: true });
    return data;
  }

  async getPlant(id: bigint): Promise<StoredPlant> {
    bigintId(id, 'id');
    const { data } = await getPlant({ client: this.client, path: { id }, throwOnError: true });
    return data;
  }

  async deletePlant(id: bigint): Promise<void> {
    bigintId(id, 'id');
    await deletePlant({ client: this.client, path: { id }, throwOnError: true });
  }

  /** One page of plants in ascending id order. */
  async listPlants(query: PlantQuery = {}): Promise<PlantPage> {
    if (query.after !== undefined) bigintId(query.after, 'query.after');
    const { data, request, response } = await listPlants({
      client: this.client,
      query,
      throwOnError: true,
    });
    return { plants: data, next: nextLink(response, request) };
  }

  /** The page at `url`, a `next` link of an earlier page, requested as the service wrote it. */
  async followLink(url: URL): Promise<PlantPage> {
    const { data, request, response } = await this.client.get<
      ListPlantsResponses,
      ListPlantsErrors,
      true
    >({
      baseUrl: url.origin,
      url: `${url.pathname}${url.search}`,
      security: [{ scheme: 'bearer', type: 'http' }],
      responseTransformer: listPlantsResponseTransformer,
      throwOnError: true,
    });
    return { plants: data, next: nextLink(response, request) };
  }

  /** Every page of `query`, from the first, following each `Link: <...>; rel="next"`. */
  async *pages(query: PlantQuery = {}): AsyncGenerator<StoredPlant[]> {
    let page = await this.listPlants(query);
    yield page.plants;
    while (page.next) {
      page = await this.followLink(page.next);
      yield page.plants;
    }
  }

  /** Every plant of `query`, a page at a time. */
  async *plants(query: PlantQuery = {}): AsyncGenerator<StoredPlant> {
    for await (const page of this.pages(query)) yield* page;
  }
}
