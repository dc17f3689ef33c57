// JSON with int64 values kept exact, on what JSON.parse and JSON.stringify offer since Node.js 21
// (V8's JSON.parse source text access: a reviver sees the number's own text, and JSON.rawJSON
// writes text as it is). No package is needed for that.

interface ReviverContext {
  /** The value's text in the document, given for numbers, strings, booleans and null. */
  source?: string;
}

const parseWithSource = JSON.parse as (
  text: string,
  reviver: (key: string, value: unknown, context: ReviverContext) => unknown,
) => unknown;
const { rawJSON } = JSON as unknown as { rawJSON(text: string): unknown };

const INTEGER = /^-?\d+$/;

/**
 * `text` with every integer that a double cannot hold exactly written as a string of its digits,
 * so that the generated response transformers, which apply `BigInt()` to int64 fields, make the
 * exact value of it instead of the rounded one that JSON.parse would hand them.
 */
export function quoteUnsafeIntegers(text: string): string {
  let quoted = false;
  const value = parseWithSource(text, (_key, value, { source }) => {
    if (typeof value !== 'number' || Number.isSafeInteger(value)) return value;
    if (source === undefined || !INTEGER.test(source)) return value;
    quoted = true;
    return source;
  });
  return quoted ? JSON.stringify(value) : text;
}

/** JSON text of `value` with each bigint written as a JSON integer of all its digits. */
export function stringifyExact(value: unknown): string {
  return JSON.stringify(value, (_key, item) =>
    typeof item === 'bigint' ? rawJSON(item.toString()) : item,
  );
}
