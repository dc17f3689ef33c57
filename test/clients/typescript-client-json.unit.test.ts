import { describe, expect, it } from 'vitest';
import { quoteUnsafeIntegers, stringifyExact } from '../../clients/typescript/src/exact-json.js';

describe('the TypeScript client’s exact JSON', () => {
  it('writes integers past 2^53 as strings of their own digits', () => {
    expect(
      quoteUnsafeIntegers('[9007199254740993,-9223372036854775808,{"id":9223372036854775807}]'),
    ).toBe('["9007199254740993","-9223372036854775808",{"id":"9223372036854775807"}]');
  });

  it('leaves safe integers, fractions and exponents as numbers, and text untouched when it can', () => {
    const text = '{"id": 9007199254740991, "a": 1.5, "b": 1e300, "c": "9007199254740993"}';
    expect(quoteUnsafeIntegers(text)).toBe(text);
  });

  it('writes a bigint as a JSON integer of all its digits', () => {
    expect(stringifyExact({ id: 9223372036854775807n, name: 'Fern', n: 1 })).toBe(
      '{"id":9223372036854775807,"name":"Fern","n":1}',
    );
  });
});
