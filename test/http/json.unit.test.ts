import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JsonSyntaxError, parseJsonWithInt64 } from '../../src/http/json.js';

const parse = (text: string) => parseJsonWithInt64(text, 32);

describe('parseJsonWithInt64', () => {
  it('keeps integers beyond 2^53 exact as bigint', () => {
    expect(parse('{"id":9007199254740993}')).toEqual({ id: 9007199254740993n });
    expect(parse('9223372036854775807')).toBe(9223372036854775807n);
    expect(parse('-9223372036854775808')).toBe(-9223372036854775808n);
  });

  it('returns every int64 integer as bigint, small ones included', () => {
    expect(parse('[0,-0,1,-1,42]')).toEqual([0n, 0n, 1n, -1n, 42n]);
  });

  it('reads integers written with a fraction or an exponent exactly', () => {
    expect(parse('1e3')).toBe(1000n);
    expect(parse('1.0')).toBe(1n);
    expect(parse('1.5e1')).toBe(15n);
    expect(parse('9.223372036854775807e18')).toBe(9223372036854775807n);
    expect(parse('12300e-2')).toBe(123n);
    expect(parse('0e999999999999')).toBe(0n);
  });

  it('leaves integers outside the int64 range as numbers', () => {
    expect(parse('9223372036854775808')).toBe(2 ** 63);
    expect(parse('-9223372036854775809')).toBe(-(2 ** 63));
    expect(parse('1e19')).toBe(1e19);
    expect(parse('1e400')).toBe(Number.POSITIVE_INFINITY);
    expect(parse('123456789012345678901234567890')).toBe(1.2345678901234568e29);
  });

  it('leaves fractions as numbers, even those a double would round to an integer', () => {
    expect(parse('0.5')).toBe(0.5);
    expect(parse('9007199254740993.5')).toBeTypeOf('number');
    expect(parse('1.0000000000000000001')).toBeTypeOf('number');
    expect(parse('1e-99999999999')).toBeTypeOf('number');
  });

  it('decodes strings and escapes like JSON.parse, lone surrogates included', () => {
    const text = String.raw`{"a":"x\"\\\/\b\f\n\r\t\u00e9\ud83c\udf35\ud800\u0000y"}`;
    expect(parse(text)).toEqual(JSON.parse(text));
  });

  it('parses arbitrary JSON without numbers exactly as JSON.parse does', () => {
    // Without numbers (compared below) and the keys the parser refuses on purpose.
    const numberless = fc
      .jsonValue()
      .filter((value) => !/[0-9]|"__proto__"|"prototype"/.test(JSON.stringify(value)));
    fc.assert(
      fc.property(numberless, (value) => {
        const text = JSON.stringify(value);
        expect(parse(text)).toEqual(JSON.parse(text));
      }),
    );
  });

  it('reads every number as JSON.parse does, as bigint when it is an int64 integer', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.double({ noNaN: true, noDefaultInfinity: true }),
          fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
        ),
        (value) => {
          const text = String(value);
          const parsed = parse(text);
          if (typeof parsed === 'bigint') expect(BigInt(text.replace(/\.0*$/, ''))).toBe(parsed);
          else expect(parsed).toBe(JSON.parse(text));
        },
      ),
    );
  });

  it.each([
    ['', 'empty input'],
    ['{', 'end of the input'],
    ['[', 'unexpected end'],
    ['{"a":1,}', 'property name'],
    ['[1,]', 'unexpected character'],
    ['01', 'unexpected data'],
    ['NaN', 'unexpected character'],
    ["{'a':1}", 'property name'],
    ['"a\nb"', 'control character'],
    ['"\\x"', 'invalid escape'],
    ['"\\u12"', 'invalid \\u escape'],
    ['{} {}', 'unexpected data'],
    ['-', 'invalid number'],
    ['1.', 'invalid number'],
    ['1e', 'invalid number'],
    ['tru', 'unexpected character'],
  ])('rejects %j as invalid JSON', (text, problem) => {
    expect(() => parse(text)).toThrow(JsonSyntaxError);
    expect(() => parse(text)).toThrow(problem);
  });

  it('rejects an object that repeats a key', () => {
    expect(() => parse('{"id":1,"id":2}')).toThrow('duplicate property name "id"');
  });

  it('rejects __proto__ keys and constructor.prototype, as Fastify does', () => {
    expect(() => parse('{"__proto__":{"admin":true}}')).toThrow('__proto__');
    expect(() => parse('{"a":{"constructor":{"prototype":{"x":1}}}}')).toThrow(
      'constructor.prototype',
    );
    expect(parse('{"constructor":"fine"}')).toEqual({ constructor: 'fine' });
  });

  it('rejects nesting deeper than the limit without exhausting the stack', () => {
    expect(parseJsonWithInt64('[[[]]]', 3)).toEqual([[[]]]);
    expect(() => parseJsonWithInt64('[[[[]]]]', 3)).toThrow('nesting deeper than 3 levels');
    expect(() => parse(`${'['.repeat(100_000)}${']'.repeat(100_000)}`)).toThrow('nesting');
  });
});
