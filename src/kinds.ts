import { Kind, type TUnsafe, Type, TypeRegistry } from '@sinclair/typebox';

/** The data kinds of the API's schemas, and their bounds: written once, used by every layer. */

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

/**
 * An int64 integer. The JSON body parser delivers every integer literal in the int64 range as a
 * `bigint`, so a `number` here is a fraction or out of range; a string is never converted.
 */
export function Int64(options: { description?: string } = {}): TUnsafe<bigint> {
  return Type.Unsafe<bigint>({ ...options, [Kind]: 'Int64', type: 'integer', format: 'int64' });
}
TypeRegistry.Set('Int64', (_schema, value) => {
  return typeof value === 'bigint' && value >= INT64_MIN && value <= INT64_MAX;
});

export interface TextOptions {
  minLength: number;
  maxLength: number;
  description?: string;
}

/**
 * A string of `minLength` to `maxLength` characters (Unicode code points, as JSON Schema
 * counts them) that is well-formed UTF-16 and free of U+0000, which PostgreSQL text cannot hold.
 */
export function Text(options: TextOptions): TUnsafe<string> {
  return Type.Unsafe<string>({ ...options, [Kind]: 'Text', type: 'string' });
}
TypeRegistry.Set<TextOptions>('Text', (schema, value) => textProblem(schema, value) === undefined);

function codePointLength(value: string): number {
  let length = value.length;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        length--;
        i++;
      }
    }
  }
  return length;
}

export function textProblem(
  { minLength, maxLength }: TextOptions,
  value: unknown,
): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  if (value.includes('\u0000')) return 'must not contain the character U+0000';
  if (!value.isWellFormed()) return 'must be well-formed Unicode (it contains a lone surrogate)';
  // A string has between length/2 and length code points, so most strings need no count.
  const surelyFits = value.length <= maxLength && value.length >= 2 * minLength;
  if (!surelyFits) {
    const length = codePointLength(value);
    if (length < minLength || length > maxLength) {
      return minLength === 0
        ? `must be at most ${maxLength} characters long`
        : `must be ${minLength} to ${maxLength} characters long`;
    }
  }
  return undefined;
}

const checkedKinds = new Map<string, (value: unknown) => string | undefined>();

/**
 * A value of kind `kind`, valid when `problem` finds nothing wrong with it. `problem` answers in
 * words that follow the value's name ("must be ..."), which a 400 then says.
 */
export function Checked<T>(
  kind: string,
  problem: (value: unknown) => string | undefined,
  schema: Record<string, unknown>,
): TUnsafe<T> {
  if (!checkedKinds.has(kind)) {
    checkedKinds.set(kind, problem);
    TypeRegistry.Set(kind, (_schema, value) => problem(value) === undefined);
  }
  return Type.Unsafe<T>({ ...schema, [Kind]: kind });
}

/** What is wrong with `value` as a value of the Checked kind `kind`; undefined when unknown. */
export function checkedProblem(kind: unknown, value: unknown): string | undefined {
  return typeof kind === 'string' ? checkedKinds.get(kind)?.(value) : undefined;
}
