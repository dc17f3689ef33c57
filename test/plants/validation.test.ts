import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postPlant, startTestApp, type TestApp } from '../helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function expect400(body: string, message: string | RegExp) {
  const response = await postPlant(t.app, body);
  expect(response.statusCode).toBe(400);
  expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
  const json = response.json();
  expect(Object.keys(json).sort()).toStrictEqual(['error', 'message']);
  expect(json.error).toBe(400);
  expect(json.message).toMatch(message);
}

async function plantCount(): Promise<number> {
  const [row] = await t.database.query<{ count: string }>('select count(*) from plants');
  return Number(row?.count);
}

describe('POST /plants rejects a body that is not a NewPlant with 400', () => {
  it.each([
    ['an array', '[]', 'body must be a JSON object'],
    ['a string', '"plant"', 'body must be a JSON object'],
    ['a number', '42', 'body must be a JSON object'],
    ['null', 'null', 'body must be a JSON object'],
    ['true', 'true', 'body must be a JSON object'],
    ['an empty body', '', 'body must be a JSON object, but the request body is empty'],
    ['whitespace', '  \n', /^body is not valid JSON/],
    [
      'malformed JSON',
      '{"id":1,"name":"x"',
      /^body is not valid JSON: .* at the end of the input$/,
    ],
    [
      'a trailing comma',
      '{"id":1,"name":"x",}',
      /^body is not valid JSON: expected a property name at position/,
    ],
    [
      'a duplicated key',
      '{"id":1,"name":"x","id":2}',
      'body is not valid JSON: duplicate property name "id" at position 19',
    ],
    [
      'a __proto__ key',
      '{"id":1,"name":"x","__proto__":{"a":1}}',
      /forbidden property name "__proto__"/,
    ],
    [
      'constructor.prototype',
      '{"id":1,"name":"x","constructor":{"prototype":{}}}',
      /constructor.prototype/,
    ],
    [
      'deep nesting',
      `{"id":1,"name":"x","extra":${'['.repeat(40)}${']'.repeat(40)}}`,
      /nesting deeper than 32 levels/,
    ],
  ])('%s', async (_, body, message) => {
    await expect400(body, message);
  });

  it.each([
    ['id missing', '{"name":"x"}', 'body/id is required'],
    ['name missing', '{"id":1}', 'body/name is required'],
    [
      'id as a string of digits',
      '{"id":"5","name":"x"}',
      'body/id must be a JSON integer, not a string: write 5, not "5"',
    ],
    ['id as a word', '{"id":"five","name":"x"}', 'body/id must be a JSON integer, not a string'],
    [
      'id as a string of the smallest int64',
      '{"id":"-9223372036854775808","name":"x"}',
      'body/id must be a JSON integer, not a string: write -9223372036854775808, not "-9223372036854775808"',
    ],
    ['id as true', '{"id":true,"name":"x"}', 'body/id must be a JSON integer, not a boolean'],
    ['id as null', '{"id":null,"name":"x"}', 'body/id must be a JSON integer, not null'],
    ['id as an array', '{"id":[1],"name":"x"}', 'body/id must be a JSON integer, not an array'],
    ['id as an object', '{"id":{},"name":"x"}', 'body/id must be a JSON integer, not an object'],
    ['a fractional id', '{"id":1.5,"name":"x"}', 'body/id must be an integer in the int64 range'],
    [
      'a fraction a double rounds to an integer',
      '{"id":9007199254740993.5,"name":"x"}',
      'body/id must be an integer in the int64 range',
    ],
    [
      'an id of 2^63',
      '{"id":9223372036854775808,"name":"x"}',
      'body/id must be an integer in the int64 range',
    ],
    [
      'an id below -2^63',
      '{"id":-9223372036854775809,"name":"x"}',
      'body/id must be an integer in the int64 range',
    ],
    ['an id of 1e19', '{"id":1e19,"name":"x"}', 'body/id must be an integer in the int64 range'],
    [
      'a huge exponent',
      '{"id":1e999999,"name":"x"}',
      'body/id must be an integer in the int64 range',
    ],
    ['name as a number', '{"id":1,"name":42}', 'body/name must be a string'],
    ['name as null', '{"id":1,"name":null}', 'body/name must be a string'],
    ['tag as null', '{"id":1,"name":"x","tag":null}', 'body/tag must be a string'],
    ['tag as a number', '{"id":1,"name":"x","tag":7}', 'body/tag must be a string'],
    ['tag as an object', '{"id":1,"name":"x","tag":{}}', 'body/tag must be a string'],
    ['an empty name', '{"id":1,"name":""}', 'body/name must be 1 to 256 characters long'],
    [
      'a name of 257 characters',
      `{"id":1,"name":"${'n'.repeat(257)}"}`,
      'body/name must be 1 to 256 characters long',
    ],
    [
      'a name of 257 emoji',
      `{"id":1,"name":"${'🌵'.repeat(257)}"}`,
      'body/name must be 1 to 256 characters long',
    ],
    [
      'a tag of 257 characters',
      `{"id":1,"name":"x","tag":"${'t'.repeat(257)}"}`,
      'body/tag must be at most 256 characters long',
    ],
    [
      'U+0000 in name',
      '{"id":1,"name":"a\\u0000b"}',
      'body/name must not contain the character U+0000',
    ],
    [
      'U+0000 in tag',
      '{"id":1,"name":"x","tag":"\\u0000"}',
      'body/tag must not contain the character U+0000',
    ],
    [
      'a lone high surrogate in name',
      '{"id":1,"name":"a\\ud800"}',
      'body/name must be well-formed Unicode (it contains a lone surrogate)',
    ],
    [
      'a lone low surrogate in tag',
      '{"id":1,"name":"x","tag":"\\udc00b"}',
      'body/tag must be well-formed Unicode (it contains a lone surrogate)',
    ],
  ])('%s', async (_, body, message) => {
    await expect400(body, message);
  });

  it.each(['007', '-0', '9223372036854775808', '99999999999999999999'])(
    'suggests no unquoted %s: it is no int64 either',
    async (digits) => {
      await expect400(
        `{"id":"${digits}","name":"x"}`,
        /^body\/id must be a JSON integer, not a string$/,
      );
    },
  );

  it('rejects bytes that are not UTF-8 instead of replacing them', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/plants',
      headers: { authorization: 'Bearer test-token-4f1d2c', 'content-type': 'application/json' },
      payload: Buffer.concat([
        Buffer.from('{"id":1,"name":"'),
        Buffer.from([0xc3, 0x28]),
        Buffer.from('"}'),
      ]),
    });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toStrictEqual({ error: 400, message: 'body is not valid UTF-8' });
  });

  it('stores nothing for any rejected body', async () => {
    expect(await plantCount()).toBe(0);
  });
});

describe('POST /plants accepts the edges of every limit', () => {
  it.each([
    ['a name of 1 character', '{"id":11,"name":"x"}'],
    ['a name of 256 characters', `{"id":12,"name":"${'n'.repeat(256)}"}`],
    ['a name of 256 emoji (512 UTF-16 units)', `{"id":13,"name":"${'🌵'.repeat(256)}"}`],
    ['an escaped surrogate pair', '{"id":14,"name":"\\ud83c\\udf35"}'],
    ['a tag of 256 characters', `{"id":15,"name":"x","tag":"${'t'.repeat(256)}"}`],
    ['an id written as 1.0', '{"id":17.0,"name":"x"}'],
  ])('%s', async (_, body) => {
    const response = await postPlant(t.app, body);
    expect(response.statusCode).toBe(200);
  });
});
