// The fuzz tests are only as good as their oracle: check it on its own, against known answers
// and against JSON.parse.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  exactInt64,
  INT64_MAX,
  INT64_MIN,
  isAuthorized,
  isValidText,
  type JsonNode,
  judgeBody,
  judgeContentType,
  scanJson,
} from '../helpers/oracle.js';

/** The plain value of a tree, as JSON.parse builds it (the last of repeated keys wins). */
function plain(node: JsonNode): unknown {
  switch (node.kind) {
    case 'object': {
      const result: Record<string, unknown> = {};
      for (const [key, child] of node.entries) {
        Object.defineProperty(result, key, {
          value: plain(child),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return result;
    }
    case 'array':
      return node.items.map(plain);
    case 'string':
      return node.value;
    case 'number':
      return Number(node.literal);
    case 'literal':
      return node.value;
  }
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

describe('scanJson', () => {
  it('reads what JSON.parse reads, to the same value', () => {
    fc.assert(
      fc.property(fc.json({ maxDepth: 4 }), (text) => {
        const node = scanJson(text);
        expect(node).toBeDefined();
        expect(plain(node as JsonNode)).toStrictEqual(JSON.parse(text));
      }),
      { numRuns: 500 },
    );
  });

  it('rejects what JSON.parse rejects, and only that', () => {
    const damaged = fc
      .tuple(fc.json({ maxDepth: 3 }), fc.nat(), fc.string({ unit: 'binary', maxLength: 3 }))
      .map(([text, at, insert]) => {
        const cut = at % (text.length + 1);
        return text.slice(0, cut) + insert + text.slice(cut + 1);
      });
    fc.assert(
      fc.property(fc.oneof(damaged, fc.string({ maxLength: 12 })), (text) => {
        expect(scanJson(text) !== undefined).toBe(parses(text));
      }),
      { numRuns: 2000 },
    );
  });

  it.each([
    ['', false],
    [' ', false],
    ['{"a":1,}', false],
    ['[1,]', false],
    ['01', false],
    ['1.', false],
    ['.5', false],
    ['+1', false],
    ['"\t"', false],
    ['"\\u12"', false],
    ['"\\x41"', false],
    ['\u00a0{}', false],
    ['{} x', false],
    [' {"a" : [1, -0.5e+3, "\\ud800", true, null]} ', true],
  ])('%j is JSON: %s', (text, valid) => {
    expect(scanJson(text) !== undefined).toBe(valid);
    expect(parses(text)).toBe(valid);
  });
});

describe('exactInt64', () => {
  it.each([
    ['0', 0n],
    ['-0', 0n],
    ['-0.0e-7', 0n],
    ['0e999999999999', 0n],
    ['1e3', 1000n],
    ['1.000E+3', 1000n],
    ['10000e-1', 1000n],
    ['0.1e1', 1n],
    ['17.0', 17n],
    ['9007199254740993', 9007199254740993n],
    ['9.007199254740993e15', 9007199254740993n],
    ['9223372036854775807', INT64_MAX],
    ['-9223372036854775808', INT64_MIN],
    ['-9223372036854775808.000', INT64_MIN],
    ['92233720368547758070e-1', INT64_MAX],
    ['12345678901234567890000e-4', 1234567890123456789n],
  ])('reads %s as %s', (literal, value) => {
    expect(exactInt64(literal)).toBe(value);
  });

  it.each([
    '1.5',
    '9007199254740993.5',
    '9223372036854775807.5',
    '9223372036854775808',
    '-9223372036854775809',
    '1e19',
    '1e308',
    '1e999999999999',
    '1e-1',
    '5e-324',
    '123456789012345678901234567890',
  ])('finds no int64 in %s', (literal) => {
    expect(exactInt64(literal)).toBeUndefined();
  });

  it('reads every integer in any of its spellings, in range or not', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
        fc.integer({ min: 0, max: 5 }),
        (value, zeros) => {
          const expected = value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
          const padding = '0'.repeat(zeros);
          for (const literal of [
            `${value}`,
            `${value}.${padding}0`,
            `${value}${padding}e-${zeros}`,
          ]) {
            expect(exactInt64(literal)).toBe(expected);
          }
          expect(exactInt64(`${value}.${padding}1`)).toBeUndefined();
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe('isValidText', () => {
  it.each([
    ['x', 1, 256, true],
    ['', 1, 256, false],
    ['', 0, 256, true],
    ['n'.repeat(256), 1, 256, true],
    ['n'.repeat(257), 1, 256, false],
    ['🌵'.repeat(256), 1, 256, true],
    ['🌵'.repeat(257), 1, 256, false],
    ['e\u0301'.repeat(128), 1, 256, true],
    ['a\u0000', 1, 256, false],
    ['a\ud800', 1, 256, false],
    ['\udc00a', 1, 256, false],
    ['\ud83c\udf35', 1, 1, true],
  ])('%j with %i to %i code points: %s', (value, min, max, valid) => {
    expect(isValidText(value, min, max)).toBe(valid);
  });
});

describe('judgeBody', () => {
  const body = (text: string) => judgeBody(Buffer.from(text, 'utf8'));
  const nested = (depth: number) =>
    `{"id":1,"name":"x","n":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;

  it.each([
    ['{"id":1,"name":"x"}', { id: 1n, name: 'x', tag: null }],
    ['{"id":1e3,"name":"x","tag":""}', { id: 1000n, name: 'x', tag: '' }],
    [
      '\ufeff{"\\u0069d":-0,"name":"\\ud83c\\udf35","extra":[{}]}',
      { id: 0n, name: '🌵', tag: null },
    ],
    [nested(32), { id: 1n, name: 'x', tag: null }],
  ])('accepts %j', (text, plant) => {
    expect(body(text)).toStrictEqual({ valid: true, plant });
  });

  it.each([
    '',
    '[{"id":1,"name":"x"}]',
    '{"id":1,"name":"x","id":1}',
    '{"id":1,"name":"x","\\u0069d":1}',
    '{"id":1,"name":"x","a":{"b":1,"b":1}}',
    '{"id":1,"name":"x","__proto__":{}}',
    '{"id":1,"name":"x","a":[{"__proto__":1}]}',
    '{"id":1,"name":"x","constructor":{"prototype":1}}',
    nested(33),
    '{"id":"1","name":"x"}',
    '{"id":1.5,"name":"x"}',
    '{"id":1,"name":""}',
    '{"id":1,"name":"\\u0000"}',
    '{"id":1,"name":"x","tag":null}',
    '\ufeff\ufeff{"id":1,"name":"x"}',
  ])('rejects %j', (text) => {
    expect(body(text).valid).toBe(false);
  });

  it('rejects bytes that are not UTF-8', () => {
    const bytes = Buffer.concat([
      Buffer.from('{"id":1,"name":"'),
      Buffer.from([0xc0, 0x80]),
      Buffer.from('"}'),
    ]);
    expect(judgeBody(bytes).valid).toBe(false);
  });
});

describe('isAuthorized', () => {
  const tokens = ['tok'];
  it.each([
    ['Bearer tok', true],
    ['bEARER tok', true],
    ['Bearer   tok', true],
    [undefined, false],
    ['', false],
    ['Bearer', false],
    ['Bearer tok ', false],
    ['Bearer\ttok', false],
    ['Bearer \ttok', false],
    ['Bearer tok\u00a0', false],
    ['Basic tok', false],
    ['Bearer TOK', false],
    ['Bearer tok,tok', false],
  ])('%j: %s', (header, valid) => {
    expect(isAuthorized(header, tokens)).toBe(valid);
  });
});

describe('judgeContentType', () => {
  it.each([
    [undefined, 'missing'],
    ['application/json', 'json'],
    ['Application/JSON; Charset="UTF-8"', 'json'],
    ['application/json;charset=utf8; foo=bar', 'json'],
    ['application/json; charset=latin1', 'unsupported'],
    ['application/jsonp', 'unsupported'],
    ['application/json-patch+json', 'unsupported'],
    ['text/plain', 'unsupported'],
    ['', 'unsupported'],
    ['application/json; charset=utf-8; charset=latin1', 'unclear'],
    ['application/json;', 'unclear'],
    ['application/json\u00a0', 'unclear'],
  ])('%j is %s', (header, verdict) => {
    expect(judgeContentType(header)).toBe(verdict);
  });
});
