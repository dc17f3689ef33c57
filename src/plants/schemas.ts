import { type Static, Type } from '@sinclair/typebox';
import { Int64, Text } from '../kinds.js';

export const NAME_MAX_LENGTH = 256;
export const TAG_MAX_LENGTH = 256;

const plantProperties = {
  name: Text({
    minLength: 1,
    maxLength: NAME_MAX_LENGTH,
    description: 'The name of the plant (well-formed Unicode, no U+0000)',
  }),
  tag: Type.Optional(
    Text({
      minLength: 0,
      maxLength: TAG_MAX_LENGTH,
      description: 'Tag to specify the type (well-formed Unicode, no U+0000)',
    }),
  ),
};

export const PlantSchema = Type.Object(plantProperties, {
  $id: 'Plant',
  description: 'A plant as stored; `tag` is absent when the plant has none',
});
export type Plant = Static<typeof PlantSchema>;

export const NewPlantSchema = Type.Object(
  {
    id: Int64({
      description:
        'Identification number of the plant, chosen by the client; any int64, stored exactly',
    }),
    ...plantProperties,
  },
  {
    $id: 'NewPlant',
    description:
      'A plant to create: all fields of Plant plus its id. Unknown properties are ignored',
  },
);
export type NewPlant = Static<typeof NewPlantSchema>;

export const StoredPlantSchema = Type.Object(
  {
    id: Int64({ description: 'Identification number of the plant, written with all its digits' }),
    ...plantProperties,
  },
  {
    $id: 'StoredPlant',
    description:
      'A plant as stored, with its id (a JSON integer, never rounded); `tag` is absent when the plant has none',
  },
);
export type StoredPlant = Static<typeof StoredPlantSchema>;

export const PAGE_LIMIT_MAX = 1000;
export const PAGE_LIMIT_DEFAULT = 100;

export const PlantIdParamsSchema = Type.Object({
  id: Int64({
    description: 'ID of the plant: an int64 in canonical decimal (0, or no leading zero, no +)',
  }),
});

export const PageQuerySchema = Type.Object({
  limit: Type.Optional(
    Type.Integer({
      format: 'int32',
      minimum: 1,
      maximum: PAGE_LIMIT_MAX,
      default: PAGE_LIMIT_DEFAULT,
      description: 'The maximum number of results to return',
    }),
  ),
  after: Type.Optional(
    Int64({ description: 'Return only plants whose id is greater than this one (keyset paging)' }),
  ),
  tag: Type.Optional(
    Text({
      minLength: 0,
      maxLength: TAG_MAX_LENGTH,
      description: 'Return only plants with exactly this tag (an empty value matches an empty tag)',
    }),
  ),
});
export type PageQuery = Static<typeof PageQuerySchema>;

// Examples of the bodies above, for the OpenAPI document: requests the service accepts and its
// answers to them, word for word (test/integration/openapi.test.ts sends them). Their ids stay
// within 2^53, which every JSON parser reads exactly, the reference page's included.

const monstera = { id: 9007199254740991, name: 'Monstera', tag: 'aroid' };

const errorExample = (error: number, message: string, summary: string) => ({
  summary,
  value: { error, message },
});

/** Examples of NewPlant, Plant, StoredPlant and pages of them. */
export const plantExamples = {
  newPlant: {
    monstera: { summary: 'A Monstera, with an id beyond 32 bits', value: monstera },
    fern: { summary: 'A plant without a tag', value: { id: 1, name: 'Fern' } },
  },
  createdPlant: {
    monstera: { summary: 'The Monstera, as stored', value: { name: 'Monstera', tag: 'aroid' } },
  },
  storedPlant: {
    monstera: { summary: 'The Monstera, with its id', value: monstera },
  },
  page: {
    full: {
      summary: 'GET /plants?limit=3: a full page (the Link header gives the next one)',
      value: [{ id: 1, name: 'Fern' }, { id: 2, name: 'Ivy', tag: '' }, monstera],
    },
    aroids: {
      summary: 'GET /plants?tag=aroid: the plants tagged aroid',
      value: [monstera],
    },
  },
};

/** Examples of the Error bodies of the plant operations. */
export const plantErrorExamples = {
  invalidBody: {
    wrongType: errorExample(
      400,
      'body/id must be a JSON integer, not a string: write 5, not "5"',
      'The id is a string ("5"), not a number',
    ),
    emptyName: errorExample(400, 'body/name must be 1 to 256 characters long', 'The name is empty'),
  },
  invalidId: {
    leadingZero: errorExample(
      400,
      'params/id must be an integer in canonical decimal form, such as 42 or -7',
      'The id in the path is 007',
    ),
  },
  invalidPage: {
    limit: errorExample(
      400,
      'querystring/limit must be an integer from 1 to 1000, such as 100',
      'limit=0',
    ),
    repeated: errorExample(
      400,
      'querystring/after must not be given more than once',
      'after=1&after=2',
    ),
  },
  unauthenticated: {
    missing: errorExample(401, 'a bearer token is required', 'No Authorization header'),
    unknown: errorExample(
      401,
      'the bearer token is not valid',
      'A token the service does not accept',
    ),
  },
  notFound: {
    noSuchPlant: errorExample(404, 'no plant has the id 4', 'GET /plants/4 when there is none'),
  },
  timeout: {
    slow: errorExample(
      408,
      'the request took too long to arrive',
      'The request arrived too slowly',
    ),
  },
  conflict: {
    otherName: errorExample(
      409,
      'a plant with id 9007199254740991 already exists with a different name or tag',
      'The id of the Monstera, with another name',
    ),
  },
  tooLarge: {
    body: errorExample(
      413,
      'the request body is larger than the limit of 65536 bytes',
      'A body over BODY_LIMIT (65536 bytes by default)',
    ),
  },
  notJson: {
    contentType: errorExample(
      415,
      'Content-Type must be application/json',
      'Content-Type: text/plain',
    ),
  },
  tooMany: {
    failedAuthentication: errorExample(
      429,
      'too many failed authentication attempts from this address; retry later',
      'Over AUTH_FAILURE_LIMIT failed authentications',
    ),
  },
  headersTooLarge: {
    headers: errorExample(431, 'the request headers are too large', 'Headers over the limit'),
  },
  fault: {
    unexpected: errorExample(
      500,
      'an unexpected error occurred; it has been logged',
      'A fault in the service (its details are in the log)',
    ),
  },
  unavailable: {
    database: errorExample(
      503,
      'the database is unavailable; retry later',
      'The database does not answer (Retry-After: 2)',
    ),
    busy: errorExample(
      503,
      'the service is busy; retry later',
      'Too many requests wait for the database (Retry-After: 1)',
    ),
    starting: errorExample(
      503,
      'the service is starting; retry shortly',
      'The database is not open yet (Retry-After: 1)',
    ),
  },
};
