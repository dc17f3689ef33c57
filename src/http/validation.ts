import { Kind, type Static, type TSchema, type TUnsafe, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Errors, type ValueError, ValueErrorType } from '@sinclair/typebox/errors';
import type { FastifySchemaCompiler } from 'fastify';
import { checkedProblem, INT64_MAX, INT64_MIN, type TextOptions, textProblem } from '../kinds.js';
import { HttpError } from './errors.js';

/** A `$ref` to a schema registered by its `$id`, typed as that schema. */
export function refTo<T extends TSchema>(schema: T): TUnsafe<Static<T>> {
  if (!schema.$id) throw new Error('refTo needs a schema with an $id');
  return Type.Unsafe<Static<T>>(Type.Ref(schema.$id));
}

/** True for an int64 as its digits read once unquoted: no leading zero, no `-0`, in range. */
function isCanonicalInt64(text: string): boolean {
  return (
    /^(0|-?[1-9]\d{0,18})$/.test(text) && BigInt(text) >= INT64_MIN && BigInt(text) <= INT64_MAX
  );
}

/** Why `value`, which is not an int64, was refused: its JSON type, unless it is a number. */
function int64Problem(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'bigint') {
    return 'must be an integer in the int64 range';
  }
  const type =
    value === null
      ? 'null'
      : Array.isArray(value)
        ? 'an array'
        : typeof value === 'object'
          ? 'an object'
          : `a ${typeof value}`;
  const unquoted =
    typeof value === 'string' && isCanonicalInt64(value) ? `: write ${value}, not "${value}"` : '';
  return `must be a JSON integer, not ${type}${unquoted}`;
}

function describe(error: ValueError, part: string): string {
  const where = `${part}${error.path}`;
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return `${where} is required`;
    case ValueErrorType.Object:
      return `${where} must be a JSON object`;
    case ValueErrorType.Kind:
      if (error.schema[Kind] === 'Int64') return `${where} ${int64Problem(error.value)}`;
      if (error.schema[Kind] === 'Text') {
        return `${where} ${textProblem(error.schema as unknown as TextOptions, error.value)}`;
      }
      return `${where} ${checkedProblem(error.schema[Kind], error.value) ?? 'is not valid'}`;
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

/**
 * The message a request part checked against `schema` is refused with when it holds `value`:
 * the examples of the 400s are made by it, in the words the validator answers with.
 */
export function refusalMessage(
  schema: TSchema,
  part: string,
  value: unknown,
  references: TSchema[] = [],
): string {
  const first = Errors(schema, references, value).First();
  if (!first) throw new Error(`${part} accepts ${JSON.stringify(value)}`);
  return describe(first, part);
}
