import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { textArrayLiteral } from '../../src/plants/queries.js';

// node-postgres' own writing of an array parameter, the reference.
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as {
  prepareValue(value: unknown): string;
};

describe('textArrayLiteral', () => {
  it('writes the text[] literal node-postgres writes, escapes included', () => {
    const texts = ['a"b', 'c\\d', '', 'NULL', ' x ', '{,}', 'é🌿', '\\"', 'line\nbreak'];
    expect(textArrayLiteral([...texts, null])).toBe(prepareValue([...texts, null]));
    fc.assert(
      fc.property(fc.array(fc.option(fc.string({ unit: 'grapheme' }), { nil: null })), (values) => {
        expect(textArrayLiteral(values)).toBe(prepareValue(values));
      }),
    );
  });
});
