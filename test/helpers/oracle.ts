// An oracle for POST /plants, written from the product contract (shared/PRODUCT.md) and the
// standards it cites, without any of the service's code: the fuzz tests ask it what the service
// must answer to a request and compare. It works on the raw bytes and header values, so that
// exact int64 reasoning, duplicate keys and escapes are judged on the text as sent.

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

// ---- JSON text (RFC 8259), scanned into a tree that keeps what JSON.parse loses ----

export type JsonNode =
  /** Entries in the order written, duplicates included; keys with their escapes resolved. */
  | { kind: 'object'; entries: Array<[string, JsonNode]> }
  | { kind: 'array'; items: JsonNode[] }
  | { kind: 'string'; value: string }
  /** The number exactly as written. */
  | { kind: 'number'; literal: string }
  | { kind: 'literal'; value: boolean | null };

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const HEX4 = /^[0-9a-fA-F]{4}$/;
const SHORT_ESCAPES: Record<string, string> = {
  '"': '"',
  '\\': '\\',
  '/': '/',
  b: '\b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
};

/** The tree of a JSON text, or undefined when the text is not JSON. */
export function scanJson(text: string): JsonNode | undefined {
  let at = 0;
  const isSpace = (c: string | undefined) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
  const space = () => {
    while (isSpace(text[at])) at++;
  };
  class NotJson extends Error {}
  const reject = (): never => {
    throw new NotJson();
  };

  const string = (): string => {
    // at is on the opening quote
    at++;
    let out = '';
    for (;;) {
      const c = text[at];
      if (c === undefined) reject();
      else if (c === '"') {
        at++;
        return out;
      } else if (c === '\\') {
        const e = text[at + 1];
        if (e === 'u') {
          const hex = text.slice(at + 2, at + 6);
          if (!HEX4.test(hex)) reject();
          out += String.fromCharCode(Number.parseInt(hex, 16));
          at += 6;
        } else if (e !== undefined && Object.hasOwn(SHORT_ESCAPES, e)) {
          out += SHORT_ESCAPES[e];
          at += 2;
        } else reject();
      } else if (c.charCodeAt(0) < 0x20) reject();
      else {
        out += c;
        at++;
      }
    }
  };

  const value = (): JsonNode => {
    space();
    const c = text[at];
    if (c === '{') {
      at++;
      const entries: Array<[string, JsonNode]> = [];
      space();
      if (text[at] === '}') {
        at++;
        return { kind: 'object', entries };
      }
      for (;;) {
        space();
        if (text[at] !== '"') reject();
        const key = string();
        space();
        if (text[at] !== ':') reject();
        at++;
        entries.push([key, value()]);
        space();
        if (text[at] === ',') at++;
        else if (text[at] === '}') {
          at++;
          return { kind: 'object', entries };
        } else reject();
      }
    }
    if (c === '[') {
      at++;
      const items: JsonNode[] = [];
      space();
      if (text[at] === ']') {
        at++;
        return { kind: 'array', items };
      }
      for (;;) {
        items.push(value());
        space();
        if (text[at] === ',') at++;
        else if (text[at] === ']') {
          at++;
          return { kind: 'array', items };
        } else reject();
      }
    }
    if (c === '"') return { kind: 'string', value: string() };
    for (const [word, literal] of [
      ['true', true],
      ['false', false],
      ['null', null],
    ] as const) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return { kind: 'literal', value: literal };
      }
    }
    NUMBER.lastIndex = at;
    const number = NUMBER.exec(text);
    if (!number) return reject();
    at += number[0].length;
    return { kind: 'number', literal: number[0] };
  };

  try {
    const node = value();
    space();
    return at === text.length ? node : undefined;
  } catch (error) {
    if (error instanceof NotJson) return undefined;
    throw error;
  }
}

/** Containers nested in `node`: 0 for a scalar, 1 for `{}` or `[]`, 2 for `[[]]`. */
export function nestingDepth(node: JsonNode): number {
  if (node.kind === 'object') {
    return 1 + Math.max(0, ...node.entries.map(([, child]) => nestingDepth(child)));
  }
  if (node.kind === 'array') return 1 + Math.max(0, ...node.items.map(nestingDepth));
  return 0;
}

/**
 * Why the object structure is refused even though it is JSON (a repeated key, a `__proto__` key,
 * a `constructor` whose value has a `prototype`, anywhere in the tree), or undefined.
 */
export function forbiddenStructure(node: JsonNode): string | undefined {
  if (node.kind === 'array') {
    for (const item of node.items) {
      const found = forbiddenStructure(item);
      if (found) return found;
    }
    return undefined;
  }
  if (node.kind !== 'object') return undefined;
  const seen = new Set<string>();
  for (const [key, child] of node.entries) {
    if (seen.has(key)) return `repeated key ${JSON.stringify(key)}`;
    seen.add(key);
    if (key === '__proto__') return 'a __proto__ key';
    if (
      key === 'constructor' &&
      child.kind === 'object' &&
      child.entries.some(([name]) => name === 'prototype')
    ) {
      return 'constructor.prototype';
    }
    const found = forbiddenStructure(child);
    if (found) return found;
  }
  return undefined;
}

const NUMBER_PARTS = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/;

/**
 * The exact value a JSON number literal denotes, when that value is an integer in the int64
 * range; undefined for a fraction or anything out of range. Computed on the decimal digits, so
 * neither 9007199254740993 nor 1e19 goes near a double.
 */
export function exactInt64(literal: string): bigint | undefined {
  const parts = NUMBER_PARTS.exec(literal);
  if (!parts) throw new Error(`not a JSON number: ${literal}`);
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = parts;
  // value = digits x 10^scale
  let digits = `${whole}${fraction}`.replace(/^0+/, '');
  if (digits === '') return 0n; // 0, -0, 0.000e99 ...
  let scale = BigInt(exponent) - BigInt(fraction.length);
  const significant = digits.replace(/0+$/, '');
  scale += BigInt(digits.length - significant.length);
  digits = significant;
  if (scale < 0n) return undefined; // a non-zero digit sits after the decimal point
  // 2^63 has 19 digits: anything longer is out of range (and 10^big is never computed).
  if (BigInt(digits.length) + scale > 19n) return undefined;
  const magnitude = BigInt(digits) * 10n ** scale;
  const value = sign === '-' ? -magnitude : magnitude;
  return value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
}

/**
 * Whether a string is a valid NewPlant text field: well-formed UTF-16 (no lone surrogate), no
 * U+0000, and `min` to `max` Unicode code points long.
 */
export function isValidText(value: string, min: number, max: number): boolean {
  let codePoints = 0;
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    if (unit === 0) return false;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i++;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return false;
    }
    codePoints++;
  }
  return codePoints >= min && codePoints <= max;
}

// ---- the body of POST /plants ----

export interface PlantRow {
  id: bigint;
  name: string;
  /** null when the plant has no tag. */
  tag: string | null;
}

export type BodyVerdict =
  | { valid: true; plant: PlantRow }
  | { valid: false; reason: string; json: boolean };

export const JSON_MAX_DEPTH = 32;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The text of a body, or undefined when its bytes are not UTF-8. */
export function decodeUtf8(bytes: Uint8Array): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** What the contract says about these bytes as the body of POST /plants. */
export function judgeBody(bytes: Uint8Array): BodyVerdict {
  let text = decodeUtf8(bytes);
  if (text === undefined) return { valid: false, reason: 'not UTF-8', json: false };
  // RFC 8259 §8.1: a parser MAY ignore a byte order mark; this one may, but only one.
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  const node = scanJson(text);
  if (!node) return { valid: false, reason: 'not JSON', json: false };
  if (nestingDepth(node) > JSON_MAX_DEPTH) {
    return { valid: false, reason: 'nested too deep', json: true };
  }
  const forbidden = forbiddenStructure(node);
  if (forbidden) return { valid: false, reason: forbidden, json: true };
  if (node.kind !== 'object') return { valid: false, reason: 'not an object', json: true };
  const field = (name: string) => node.entries.find(([key]) => key === name)?.[1];
  const id = field('id');
  const name = field('name');
  const tag = field('tag');
  if (id?.kind !== 'number') return { valid: false, reason: 'id is not a number', json: true };
  const exactId = exactInt64(id.literal);
  if (exactId === undefined) return { valid: false, reason: 'id is not int64', json: true };
  if (name?.kind !== 'string' || !isValidText(name.value, 1, 256)) {
    return { valid: false, reason: 'name is not valid', json: true };
  }
  if (tag !== undefined && (tag.kind !== 'string' || !isValidText(tag.value, 0, 256))) {
    return { valid: false, reason: 'tag is not valid', json: true };
  }
  return {
    valid: true,
    plant: { id: exactId, name: name.value, tag: tag?.kind === 'string' ? tag.value : null },
  };
}

// ---- headers ----

/**
 * Whether an Authorization header value carries one of `tokens` (RFC 7235 / RFC 6750:
 * `Bearer 1*SP b64token`, the scheme word in any case, the token exactly). The value is taken as
 * a server receives it, without the whitespace around it that HTTP strips.
 */
export function isAuthorized(header: string | undefined, tokens: readonly string[]): boolean {
  if (header === undefined) return false;
  const credentials = /^bearer +(.*)$/is.exec(header);
  return credentials !== null && tokens.includes(credentials[1] ?? '');
}

export type ContentTypeVerdict =
  /** application/json, with no charset or a UTF-8 one: the body decides. */
  | 'json'
  /** Not application/json, or application/json in another charset: 415. */
  | 'unsupported'
  /** No Content-Type header: 415 when a body is sent, otherwise the (empty) body decides. */
  | 'missing'
  /**
   * Starts like application/json but is not a well-formed media type (odd parameters, stray
   * characters): the contract does not say; 415 or a JSON reading are both acceptable.
   */
  | 'unclear';

const PARAMETER = /[ \t]*;[ \t]*([a-z0-9-]+)=(?:([a-z0-9-]+)|"([a-z0-9-]*)")/giy;

/** What the contract says about a Content-Type header value. */
export function judgeContentType(header: string | undefined): ContentTypeVerdict {
  if (header === undefined) return 'missing';
  const value = header.replace(/^[ \t]+|[ \t]+$/g, '');
  // Anything that does not even begin with the media type is not JSON.
  if (!/^\s*application\/json/i.test(value)) return 'unsupported';
  const mediaType = /^application\/json/iy;
  if (!mediaType.test(value)) return 'unclear';
  let at = mediaType.lastIndex;
  // application/jsonp, application/json-patch+json: another media type.
  if (/[!#$%&'*+.^_`|~0-9a-z-]/i.test(value[at] ?? '')) return 'unsupported';
  const charsets: string[] = [];
  while (at < value.length) {
    PARAMETER.lastIndex = at;
    const parameter = PARAMETER.exec(value);
    if (!parameter) return 'unclear';
    if (parameter[1]?.toLowerCase() === 'charset') {
      charsets.push((parameter[2] ?? parameter[3] ?? '').toLowerCase());
    }
    at = PARAMETER.lastIndex;
  }
  if (charsets.length > 1) return 'unclear';
  const [charset] = charsets;
  return charset === undefined || charset === 'utf-8' || charset === 'utf8'
    ? 'json'
    : 'unsupported';
}
