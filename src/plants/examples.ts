import { errorExample, exampleOfThrown, notJson } from '../http/common-answers.js';
import { refusalMessage } from '../http/validation.js';
import { noPlantMessage, plantConflictMessage } from './messages.js';
import { parseInt64, parsePageQuery } from './parameters.js';
import { NewPlantSchema } from './schemas.js';

// Examples of the plant API's bodies, for the OpenAPI document: requests the service accepts and
// its answers to them, word for word (test/http/openapi.test.ts sends them); each error's
// message is the one the code sends. Their ids stay within 2^53, which every JSON parser reads
// exactly, the reference page's included.

const monstera = { id: 9007199254740991, name: 'Monstera', tag: 'aroid' };

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

const invalidBody = (value: object, summary: string) =>
  errorExample(400, refusalMessage(NewPlantSchema, 'body', value), summary);

/** Examples of the Error bodies of the plant operations, beside the common ones. */
export const plantErrorExamples = {
  invalidBody: {
    wrongType: invalidBody({ id: '5', name: 'Monstera' }, 'The id is a string ("5"), not a number'),
    // The service's JSON parser reads int64s as bigints.
    emptyName: invalidBody({ id: 5n, name: '' }, 'The name is empty'),
  },
  invalidId: {
    leadingZero: exampleOfThrown(() => parseInt64('007', 'params/id'), 'The id in the path is 007'),
  },
  invalidPage: {
    limit: exampleOfThrown(() => parsePageQuery('limit=0'), 'limit=0'),
    repeated: exampleOfThrown(() => parsePageQuery('after=1&after=2'), 'after=1&after=2'),
  },
  notFound: {
    noSuchPlant: errorExample(404, noPlantMessage(4), 'GET /plants/4 when there is none'),
  },
  conflict: {
    otherName: errorExample(
      409,
      plantConflictMessage(monstera.id),
      'The id of the Monstera, with another name',
    ),
  },
};

/** The 415 of a create: its JSON parser refuses an encoded body too. */
export const notPlantJson = notJson(
  'The content type is not application/json, or the body is encoded',
);
