import type { FastifyInstance } from 'fastify';
import { INT64_MAX, INT64_MIN } from '../kinds.js';
import { HttpError } from './errors.js';

// 2^63 has 19 digits, so any integer with more significant digits is out of range.
const INT64_MAX_DIGITS = 19;

export class JsonSyntaxError extends Error {
  override name = 'JsonSyntaxError';
}

// The parser's state: module-level rather than closures made for each call, since the body of
// every create passes through here. parseJsonWithInt64 is synchronous, so calls cannot interleave.
let text = '';
let length = 0;
let pos = 0;
let maxDepth = 0;

/**
 * Parses JSON text like JSON.parse, except that every number literal whose exact value is an
 * integer in the int64 range becomes a `bigint` (so 9007199254740993 is not rounded), and the
 * input is rejected when an object repeats a key, carries a `__proto__` key or a
 * `constructor.prototype`, or nests deeper than `maxDepth`. Other numbers stay `number`.
 */
export function parseJsonWithInt64(input: string, depthLimit: number): unknown {
  text = input;
  length = input.length;
  pos = 0;
  maxDepth = depthLimit;
  try {
    skipWhitespace();
    if (pos === length) fail('empty input');
    const value = parseValue(0);
    skipWhitespace();
    if (pos !== length) fail('unexpected data after the JSON value');
    return value;
  } finally {
    text = '';
  }
}

function fail(problem: string): never {
  throw new JsonSyntaxError(
    pos >= length ? `${problem} at the end of the input` : `${problem} at position ${pos}`,
  );
}

function skipWhitespace(): void {
  while (pos < length) {
    const c = text.charCodeAt(pos);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return;
    pos++;
  }
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function expectLiteral(word: string): void {
  if (text.startsWith(word, pos)) pos += word.length;
  else fail('unexpected character');
}

function parseString(): string {
  const start = ++pos;
  while (pos < length) {
    const c = text.charCodeAt(pos);
    if (c === 0x22) return text.slice(start, pos++);
    if (c === 0x5c) break;
    if (c < 0x20) fail('control character in string');
    pos++;
  }
  let result = text.slice(start, pos);
  while (pos < length) {
    const c = text.charCodeAt(pos);
    if (c === 0x22) {
      pos++;
      return result;
    }
    if (c < 0x20) fail('control character in string');
    if (c !== 0x5c) {
      const runStart = pos;
      while (pos < length) {
        const d = text.charCodeAt(pos);
        if (d === 0x22 || d === 0x5c || d < 0x20) break;
        pos++;
      }
      result += text.slice(runStart, pos);
      continue;
    }
    pos++;
    const escaped = text.charCodeAt(pos);
    pos++;
    switch (escaped) {
      case 0x22:
        result += '"';
        break;
      case 0x5c:
        result += '\\';
        break;
      case 0x2f:
        result += '/';
        break;
      case 0x62:
        result += '\b';
        break;
      case 0x66:
        result += '\f';
        break;
      case 0x6e:
        result += '\n';
        break;
      case 0x72:
        result += '\r';
        break;
      case 0x74:
        result += '\t';
        break;
      case 0x75: {
        const hex = text.slice(pos, pos + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('invalid \\u escape');
        result += String.fromCharCode(Number.parseInt(hex, 16));
        pos += 4;
        break;
      }
      default:
        pos--;
        fail('invalid escape');
    }
  }
  return fail('unterminated string');
}

function parseNumber(): number | bigint {
  const start = pos;
  if (text.charCodeAt(pos) === 0x2d) pos++;
  const integerStart = pos;
  if (text.charCodeAt(pos) === 0x30) pos++;
  else if (isDigit(text.charCodeAt(pos))) while (isDigit(text.charCodeAt(pos))) pos++;
  else fail('invalid number');
  const integerEnd = pos;
  let fraction = '';
  if (text.charCodeAt(pos) === 0x2e) {
    const fractionStart = ++pos;
    if (!isDigit(text.charCodeAt(pos))) fail('invalid number');
    while (isDigit(text.charCodeAt(pos))) pos++;
    fraction = text.slice(fractionStart, pos);
  }
  let exponent = '';
  const e = text.charCodeAt(pos);
  if (e === 0x65 || e === 0x45) {
    const exponentStart = ++pos;
    const sign = text.charCodeAt(pos);
    if (sign === 0x2b || sign === 0x2d) pos++;
    if (!isDigit(text.charCodeAt(pos))) fail('invalid number');
    while (isDigit(text.charCodeAt(pos))) pos++;
    exponent = text.slice(exponentStart, pos);
  }
  const literal = text.slice(start, pos);
  const negative = integerStart !== start;
  const exact =
    fraction === '' && exponent === ''
      ? plainInt64(literal, integerEnd - integerStart)
      : scaledInt64(
          negative,
          text.slice(integerStart, integerEnd) + fraction,
          fraction.length,
          exponent,
        );
  return exact ?? Number(literal);
}

function parseArray(depth: number): unknown[] {
  if (depth > maxDepth) fail(`nesting deeper than ${maxDepth} levels`);
  pos++;
  const result: unknown[] = [];
  skipWhitespace();
  if (text.charCodeAt(pos) === 0x5d) {
    pos++;
    return result;
  }
  for (;;) {
    result.push(parseValue(depth));
    skipWhitespace();
    const c = text.charCodeAt(pos);
    if (c === 0x5d) {
      pos++;
      return result;
    }
    if (c !== 0x2c) fail("expected ',' or ']'");
    pos++;
    skipWhitespace();
  }
}

function parseObject(depth: number): Record<string, unknown> {
  if (depth > maxDepth) fail(`nesting deeper than ${maxDepth} levels`);
  pos++;
  const result: Record<string, unknown> = {};
  skipWhitespace();
  if (text.charCodeAt(pos) === 0x7d) {
    pos++;
    return result;
  }
  for (;;) {
    if (text.charCodeAt(pos) !== 0x22) fail('expected a property name');
    const keyStart = pos;
    const key = parseString();
    if (key === '__proto__') {
      pos = keyStart;
      fail('forbidden property name "__proto__"');
    }
    if (Object.hasOwn(result, key)) {
      pos = keyStart;
      fail(`duplicate property name ${JSON.stringify(key)}`);
    }
    skipWhitespace();
    if (text.charCodeAt(pos) !== 0x3a) fail("expected ':'");
    pos++;
    skipWhitespace();
    const value = parseValue(depth);
    if (
      key === 'constructor' &&
      typeof value === 'object' &&
      value !== null &&
      Object.hasOwn(value, 'prototype')
    ) {
      pos = keyStart;
      fail('forbidden property "constructor.prototype"');
    }
    result[key] = value;
    skipWhitespace();
    const c = text.charCodeAt(pos);
    if (c === 0x7d) {
      pos++;
      return result;
    }
    if (c !== 0x2c) fail("expected ',' or '}'");
    pos++;
    skipWhitespace();
  }
}

function parseValue(depth: number): unknown {
  const c = text.charCodeAt(pos);
  switch (c) {
    case 0x7b:
      return parseObject(depth + 1);
    case 0x5b:
      return parseArray(depth + 1);
    case 0x22:
      return parseString();
    case 0x74:
      expectLiteral('true');
      return true;
    case 0x66:
      expectLiteral('false');
      return false;
    case 0x6e:
      expectLiteral('null');
      return null;
    default:
      if (c === 0x2d || isDigit(c)) return parseNumber();
      return fail(pos >= length ? 'unexpected end' : 'unexpected character');
  }
}

function inInt64Range(value: bigint): bigint | undefined {
  return value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
}

/** An integer literal without fraction or exponent; JSON forbids leading zeros. */
function plainInt64(literal: string, digitCount: number): bigint | undefined {
  return digitCount > INT64_MAX_DIGITS ? undefined : inInt64Range(BigInt(literal));
}

/**
 * The exact value of `digits` x 10^(exponent - fractionLength) as a bigint when it is an
 * integer in the int64 range, otherwise undefined.
 */
function scaledInt64(
  negative: boolean,
  digits: string,
  fractionLength: number,
  exponent: string,
): bigint | undefined {
  const significant = digits.replace(/^0+/, '');
  if (significant === '') return 0n;
  // Exponents beyond a few digits can only mean out of range or not an integer.
  if (exponent.replace(/^[+-]?0*/, '').length > 4) return undefined;
  const scale = (exponent === '' ? 0 : Number(exponent)) - fractionLength;
  let integer: string;
  if (scale >= 0) {
    if (significant.length + scale > INT64_MAX_DIGITS) return undefined;
    integer = significant + '0'.repeat(scale);
  } else {
    const kept = significant.length + scale;
    if (kept <= 0 || !/^0*$/.test(significant.slice(kept))) return undefined;
    integer = significant.slice(0, kept);
    if (integer.length > INT64_MAX_DIGITS) return undefined;
  }
  return inInt64Range(BigInt(negative ? `-${integer}` : integer));
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function charsetOf(contentType: string | undefined): string | undefined {
  const match = /;\s*charset\s*=\s*("?)([^";\s]*)\1/i.exec(contentType ?? '');
  return match?.[2]?.toLowerCase();
}

// A content coding other than identity is refused (RFC 9110 §8.4.1), not read as plain JSON.
function hasContentCoding(contentEncoding: string | undefined): boolean {
  if (contentEncoding === undefined) return false;
  return contentEncoding.split(',').some((coding) => {
    const name = coding.trim().toLowerCase();
    return name !== '' && name !== 'identity';
  });
}

/**
 * Replaces Fastify's body parsers in `app`'s scope with one for `mediaTypes` (by default
 * `application/json`; UTF-8 only) that keeps int64 integers exact. Every other media type, and
 * any content coding, is answered with 415.
 */
export function registerJsonBodyParser(
  app: FastifyInstance,
  maxDepth: number,
  mediaTypes: readonly string[] = ['application/json'],
): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser([...mediaTypes], { parseAs: 'buffer' }, (request, body, done) => {
    if (hasContentCoding(request.headers['content-encoding'])) {
      done(
        new HttpError(415, 'Content-Encoding must be identity: bodies are read as sent', {
          'accept-encoding': 'identity',
        }),
        undefined,
      );
      return;
    }
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      done(new HttpError(415, 'Content-Type charset must be utf-8'), undefined);
      return;
    }
    if ((body as Buffer).length === 0) {
      done(
        new HttpError(400, 'body must be a JSON object, but the request body is empty'),
        undefined,
      );
      return;
    }
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(new HttpError(400, 'body is not valid UTF-8'), undefined);
      return;
    }
    try {
      done(null, parseJsonWithInt64(text, maxDepth));
    } catch (error) {
      const invalid = error instanceof JsonSyntaxError;
      done(
        invalid ? new HttpError(400, `body is not valid JSON: ${error.message}`) : (error as Error),
        undefined,
      );
    }
  });
}
