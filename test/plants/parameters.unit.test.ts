import { describe, expect, it } from 'vitest';
import { HttpError } from '../../src/http/errors.js';
import { parseInt64, parsePageQuery } from '../../src/plants/parameters.js';
import { storedPlantJson } from '../../src/plants/serialize.js';

/** The status and message a parse fails with. */
function failure(parse: () => unknown): { status: number; message: string } {
  try {
    parse();
  } catch (error) {
    if (error instanceof HttpError) return { status: error.statusCode, message: error.message };
    throw error;
  }
  throw new Error('the parse did not fail');
}

describe('an id in canonical decimal', () => {
  it.each([
    ['0', 0n],
    ['7', 7n],
    ['-7', -7n],
    ['9007199254740993', 9007199254740993n],
    ['9223372036854775807', 9223372036854775807n],
    ['-9223372036854775808', -9223372036854775808n],
  ])('reads %s as the integer it spells', (text, value) => {
    expect(parseInt64(text, 'params/id')).toBe(value);
  });

  it.each(['', '-0', '007', '00', '+5', '1.0', '1e3', ' 1', '1 ', '0x10', '-', '١', '1_000'])(
    'refuses %j as not canonical, naming the parameter',
    (text) => {
      expect(failure(() => parseInt64(text, 'params/id'))).toStrictEqual({
        status: 400,
        message: 'params/id must be an integer in canonical decimal form, such as 42 or -7',
      });
    },
  );

  it.each(['9223372036854775808', '-9223372036854775809', '1'.repeat(400)])(
    'refuses %s as out of the int64 range',
    (text) => {
      expect(failure(() => parseInt64(text, 'querystring/after'))).toStrictEqual({
        status: 400,
        message: 'querystring/after must be an integer in the int64 range',
      });
    },
  );
});

describe('the query of a page', () => {
  it('reads limit, after and tag, and ignores the rest', () => {
    expect(parsePageQuery('limit=5&after=-3&tag=aroid&sort=desc&x')).toStrictEqual({
      limit: 5,
      after: -3n,
      tag: 'aroid',
    });
  });

  it('has no parameter at all for an empty query', () => {
    expect(parsePageQuery('')).toStrictEqual({});
  });

  it.each([
    ['tag=caf%C3%A9%20%2B%26', 'café +&'],
    ['tag=two+words', 'two words'],
    ['tag=', ''],
    ['tag', ''],
    ['t%61g=encoded%20name', 'encoded name'],
    ['tag=%EF%BB%BFbom', '\ufeffbom'],
    ['tag=%F0%9F%8C%B5', '🌵'],
  ])('decodes %s to the tag %j', (query, tag) => {
    expect(parsePageQuery(query)).toStrictEqual({ tag });
  });

  it.each([
    ['limit=1&limit=1', 'querystring/limit must not be given more than once'],
    ['after=1&after=2', 'querystring/after must not be given more than once'],
    ['tag=a&tag=a', 'querystring/tag must not be given more than once'],
    ['tag=a&t%61g=b', 'querystring/tag must not be given more than once'],
    ['tag=%ZZ', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=%', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=%FF', 'querystring/tag must be percent-encoded UTF-8'],
    ['tag=%ED%A0%80', 'querystring/tag must be percent-encoded UTF-8'],
    ['limit=%3', 'querystring/limit must be percent-encoded UTF-8'],
    ['limit=0', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    ['limit=1001', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    ['limit=-1', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    [
      'limit=99999999999999999999',
      'querystring/limit must be an integer from 1 to 1000, such as 100',
    ],
    ['limit=', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    ['limit=+5', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    ['limit=1.0', 'querystring/limit must be an integer from 1 to 1000, such as 100'],
    [
      'after=-0',
      'querystring/after must be an integer in canonical decimal form, such as 42 or -7',
    ],
    [
      'after=1e3',
      'querystring/after must be an integer in canonical decimal form, such as 42 or -7',
    ],
  ])('refuses %s with a 400: %s', (query, message) => {
    expect(failure(() => parsePageQuery(query))).toStrictEqual({ status: 400, message });
  });

  it('ignores an unknown parameter whatever it holds', () => {
    expect(parsePageQuery('%ZZ=1&x=%FF&limit=2&l%69mit%=3')).toStrictEqual({ limit: 2 });
  });
});

describe('a stored plant as JSON', () => {
  it('writes the id with all its digits, as a JSON integer', () => {
    expect(storedPlantJson({ id: 9223372036854775807n, name: 'max' })).toBe(
      '{"id":9223372036854775807,"name":"max"}',
    );
    expect(storedPlantJson({ id: -9223372036854775808n, name: 'min', tag: '' })).toBe(
      '{"id":-9223372036854775808,"name":"min","tag":""}',
    );
  });

  it.each([
    'quote " and backslash \\',
    'control \u0001\u001f\n\t\r\b\f characters',
    '\ufeffleading byte order mark',
    'line and paragraph separators \u2028\u2029',
    'emoji 🌵 and combining e\u0301',
    '</script>',
  ])('escapes %j so that a JSON parser reads it back exactly', (text) => {
    const json = storedPlantJson({ id: 1n, name: text, tag: text });
    expect(JSON.parse(json)).toStrictEqual({ id: 1, name: text, tag: text });
  });
});
