import {
  Kind,
  type Static,
  type TSchema,
  type TUnsafe,
  Type,
  TypeRegistry,
} from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { type ValueError, ValueErrorType } from '@sinclair/typebox/errors';
import type { FastifySchemaCompiler } from 'fastify';
import { HttpError } from './errors.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A `$ref` to a schema registered by its `$id`, typed as that schema. */
export function refTo<T extends TSchema>(schema: T): TUnsafe<Static<T>> {
  if (!schema.$id) throw new Error('refTo needs a schema with an $id');
  return Type.Unsafe<Static<T>>(Type.Ref(schema.$id));
}

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

interface TextOptions {
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

function textProblem({ minLength, maxLength }: TextOptions, value: unknown): string | undefined {
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

function describe(error: ValueError, part: string): string {
  const where = `${part}${error.path}`;
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return `${where} is required`;
    case ValueErrorType.Object:
      return `${where} must be a JSON object`;
    case ValueErrorType.Kind:
      if (error.schema[Kind] === 'Int64') return `${where} must be an integer in the int64 range`;
      if (error.schema[Kind] === 'Text') {
        return `${where} ${textProblem(error.schema as unknown as TextOptions, error.value)}`;
      }
      return `${where} is not valid`;
    default:
      return `${where} is not valid: ${error.message.toLowerCase()}`;
  }
}

/**
 * Fastify validator compiler built on TypeBox's compiled checks: no coercion, no defaults, no
 * removal of properties; the value is checked exactly as parsed. `references` resolves `$ref`s.
 */
export function createValidatorCompiler(references: TSchema[]): FastifySchemaCompiler<TSchema> {
  return ({ schema, httpPart }) => {
    const check = TypeCompiler.Compile(schema, references);
    const part = httpPart ?? 'request';
    return (value: unknown) => {
      if (check.Check(value)) return { value };
      const first = check.Errors(value).First();
      const message = first ? describe(first, part) : `${part} is not valid`;
      return { error: new HttpError(400, message) };
    };
  };
}
