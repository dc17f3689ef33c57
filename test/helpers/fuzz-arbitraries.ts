// fast-check generators of requests to POST /plants, for test/plants/fuzz.test.ts. They
// build raw bytes and header values, so they can say what JSON.stringify cannot (duplicate keys,
// escapes of lone surrogates, number literals such as 1e3 or 9007199254740993.5). What the
// service must answer is never decided here: the oracle (oracle.ts) judges the bytes as sent.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { HASHED_TOKEN, TOKEN } from './app.js';
import { INT64_MAX, INT64_MIN } from './oracle.js';

export interface FuzzRequest {
  /** undefined: the header is not sent. */
  authorization: string | undefined;
  contentType: string | undefined;
  body: Buffer;
}

const VALID_AUTHORIZATION = `Bearer ${TOKEN}`;
const JSON_CONTENT_TYPE = 'application/json';

export const jsonRequest = (body: Buffer | string): FuzzRequest => ({
  authorization: VALID_AUTHORIZATION,
  contentType: JSON_CONTENT_TYPE,
  body: typeof body === 'string' ? Buffer.from(body, 'utf8') : body,
});

// ---- characters ----

// Marks that change the direction or the shape of text without being seen.
const INVISIBLE_AND_BIDI = [
  0x00a0, 0x00ad, 0x034f, 0x061c, 0x180e, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x2028, 0x2029,
  0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2060, 0x2066, 0x2067, 0x2068, 0x2069, 0xfeff,
];

/** A Unicode scalar value other than U+0000, biased towards the awkward ones. */
const cleanCodePoint = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 1, arbitrary: fc.integer({ min: 0x01, max: 0x1f }) },
  { weight: 1, arbitrary: fc.constantFrom(0x22, 0x5c, 0x2f, 0x7f) },
  { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0x7ff }) },
  { weight: 2, arbitrary: fc.integer({ min: 0x0300, max: 0x036f }) }, // combining marks
  { weight: 2, arbitrary: fc.constantFrom(...INVISIBLE_AND_BIDI) },
  { weight: 2, arbitrary: fc.integer({ min: 0x800, max: 0xd7ff }) },
  { weight: 1, arbitrary: fc.integer({ min: 0xe000, max: 0xffff }) },
  { weight: 3, arbitrary: fc.integer({ min: 0x10000, max: 0x10ffff }) }, // astral
  { weight: 1, arbitrary: fc.constantFrom(0xfffd, 0xfffe, 0xffff, 0x1fffe, 0x10ffff, 0x1f335) },
);

/** Also U+0000 and the UTF-16 code units of surrogates, which stand alone (lone surrogates). */
const anyCodePoint = fc.oneof(
  { weight: 10, arbitrary: cleanCodePoint },
  { weight: 1, arbitrary: fc.constant(0) },
  { weight: 1, arbitrary: fc.integer({ min: 0xd800, max: 0xdfff }) },
);

/** How one character is written inside a JSON string. */
type Style = 'raw' | 'unsafe-raw' | 'u-lower' | 'u-upper' | 'short';
const style: fc.Arbitrary<Style> = fc.oneof(
  { weight: 12, arbitrary: fc.constant('raw' as const) },
  { weight: 3, arbitrary: fc.constant('u-lower' as const) },
  { weight: 2, arbitrary: fc.constant('u-upper' as const) },
  { weight: 2, arbitrary: fc.constant('short' as const) },
);
const styleOrUnsafe = fc.oneof(
  { weight: 30, arbitrary: style },
  { weight: 1, arbitrary: fc.constant('unsafe-raw' as const) },
);

const SHORT: Record<number, string> = {
  34: '\\"',
  92: '\\\\',
  47: '\\/',
  8: '\\b',
  12: '\\f',
  10: '\\n',
  13: '\\r',
  9: '\\t',
};

function unitEscape(unit: number, upper: boolean): string {
  const hex = unit.toString(16).padStart(4, '0');
  return `\\u${upper ? hex.toUpperCase() : hex}`;
}

/**
 * One code point (or lone surrogate unit) as JSON string content. 'unsafe-raw' writes it as is
 * even where JSON forbids that (a quote, a backslash, a control character): a near miss.
 */
function writeCharacter(codePoint: number, how: Style): string {
  const isSurrogateUnit = codePoint >= 0xd800 && codePoint <= 0xdfff;
  const needsEscape = codePoint < 0x20 || codePoint === 0x22 || codePoint === 0x5c;
  if (how === 'unsafe-raw' && !isSurrogateUnit) return String.fromCodePoint(codePoint);
  if (how === 'short' && SHORT[codePoint]) return SHORT[codePoint];
  // A lone surrogate cannot be UTF-8: only an escape can carry it.
  if (how === 'raw' && !isSurrogateUnit && !needsEscape) return String.fromCodePoint(codePoint);
  const upper = how === 'u-upper';
  if (codePoint > 0xffff) {
    const pair = String.fromCodePoint(codePoint);
    return unitEscape(pair.charCodeAt(0), upper) + unitEscape(pair.charCodeAt(1), upper);
  }
  if (how === 'raw' && needsEscape) return SHORT[codePoint] ?? unitEscape(codePoint, false);
  return unitEscape(codePoint, upper);
}

interface StringOptions {
  codePoint: fc.Arbitrary<number>;
  how: fc.Arbitrary<Style>;
  minLength: number;
  maxLength: number;
}

function stringOfLength({ codePoint, how, minLength, maxLength }: StringOptions) {
  return fc
    .array(fc.tuple(codePoint, how), { minLength, maxLength })
    .map((characters) => `"${characters.map(([c, h]) => writeCharacter(c, h)).join('')}"`);
}

/** A JSON string literal: mostly short, sometimes at the 256/257 code point boundaries. */
export const jsonStringText = fc.oneof(
  {
    weight: 6,
    arbitrary: stringOfLength({
      codePoint: cleanCodePoint,
      how: style,
      minLength: 0,
      maxLength: 12,
    }),
  },
  {
    weight: 2,
    arbitrary: stringOfLength({
      codePoint: anyCodePoint,
      how: styleOrUnsafe,
      minLength: 0,
      maxLength: 12,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(255, 256, 257).chain((length) =>
      stringOfLength({
        codePoint: cleanCodePoint,
        how: style,
        minLength: length,
        maxLength: length,
      }),
    ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(0, 1, 2, 255, 256, 257, 300).chain((length) =>
      stringOfLength({
        codePoint: anyCodePoint,
        how: style,
        minLength: length,
        maxLength: length,
      }),
    ),
  },
);

// ---- numbers ----

const INTERESTING_INTEGERS = [
  0n,
  1n,
  -1n,
  2n ** 53n,
  2n ** 53n + 1n,
  -(2n ** 53n) - 1n,
  INT64_MAX,
  INT64_MIN,
  INT64_MAX + 1n,
  INT64_MIN - 1n,
  10n ** 18n,
  10n ** 19n,
  -(10n ** 19n),
  2n ** 64n,
  2n ** 64n - 1n,
];

/** Integers, mostly in the int64 range (and so, almost always, fresh ids), some beyond it. */
export const integerValue = fc.oneof(
  { weight: 8, arbitrary: fc.bigInt({ min: INT64_MIN, max: INT64_MAX }) },
  { weight: 2, arbitrary: fc.constantFrom(...INTERESTING_INTEGERS) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom(INT64_MAX, INT64_MIN, 2n ** 53n, 0n), fc.integer({ min: -3, max: 3 }))
      .map(([base, offset]) => base + BigInt(offset)),
  },
  { weight: 1, arbitrary: fc.bigInt({ min: -(2n ** 80n), max: 2n ** 80n }) },
);

/** An integer written in one of the ways JSON allows: 1000, 1000.0, 1e3, 1.000E+3, 10000e-1 ... */
function writeInteger(value: bigint, form: number, padding: number): string {
  const sign = value < 0n ? '-' : '';
  const digits = (value < 0n ? -value : value).toString();
  const zeros = '0'.repeat(padding);
  switch (form) {
    case 1:
      return `${sign}${digits}.0${zeros}`;
    case 2:
      return `${sign}${digits}${zeros}e-${padding}`;
    case 3:
      return digits.length === 1
        ? `${sign}${digits}E+0`
        : `${sign}${digits[0]}.${digits.slice(1)}e${digits.length - 1}`;
    case 4: {
      const significant = digits.replace(/0+$/, '') || '0';
      return `${sign}${significant}e+${digits.length - significant.length}`;
    }
    case 5:
      return `${sign}0.${digits}E${digits.length}`;
    case 6:
      return value === 0n ? `-0${padding > 0 ? `.${zeros}` : ''}` : `${sign}${digits}`;
    default:
      return `${sign}${digits}`;
  }
}

const integerLiteral = fc
  .tuple(integerValue, fc.integer({ min: 0, max: 9 }), fc.integer({ min: 0, max: 4 }))
  .map(([value, form, padding]) => writeInteger(value, form <= 3 ? 0 : form - 3, padding));

/** Numbers that are not integers, or not in range, or not representable as a double. */
const otherNumberLiteral = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
  fc.constantFrom(
    '1e308',
    '1e309',
    '-1e308',
    '1e-400',
    '1e999999',
    '1E+999999999999',
    '-1e-999999999999',
    '0e999999999999',
    '9007199254740993.5',
    '9223372036854775807.5',
    '9223372036854775807.0000000001',
    '-9223372036854775808.5',
    '-9223372036854775808.000',
    '0.5',
    '1.5e-1',
    '123456789012345678901234567890',
    '1e19',
    '9.223372036854775807e18',
    '9.2233720368547758075e18',
    '92233720368547758070e-1',
    '0.00000000000000000000000000001e29',
  ),
  fc
    .tuple(integerValue, fc.integer({ min: 0, max: 5 }))
    .map(([value, zeros]) => `${value}.${'0'.repeat(zeros)}1`),
);

/** Not JSON numbers at all: the body is then not JSON. */
const notANumber = fc.constantFrom(
  '01',
  '-01',
  '+1',
  '.5',
  '1.',
  '1e',
  '1e+',
  '0x10',
  '1_000',
  'Infinity',
  '-Infinity',
  'NaN',
  '- 1',
  '1n',
  '0.0.1',
  '--1',
  '\uff11',
);

const wrongTypeLiteral = fc.oneof(
  fc.constantFrom('true', 'false', 'null', '[]', '{}', '[1]', '{"$numberLong":"1"}', '""'),
  integerValue.map((value) => `"${value}"`),
);

/** Any JSON value as text, from fast-check's own generator. */
export const jsonValueText = fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value));

const idValueText = fc.oneof(
  { weight: 12, arbitrary: integerLiteral },
  { weight: 3, arbitrary: otherNumberLiteral },
  { weight: 1, arbitrary: notANumber },
  { weight: 2, arbitrary: wrongTypeLiteral },
  { weight: 1, arbitrary: jsonValueText },
);

const textValueText = fc.oneof(
  { weight: 12, arbitrary: jsonStringText },
  { weight: 1, arbitrary: otherNumberLiteral },
  { weight: 1, arbitrary: wrongTypeLiteral },
  { weight: 1, arbitrary: jsonValueText },
);

// ---- objects ----

/** A key as JSON text: mostly as is, sometimes with \u escapes, in another case, padded. */
function keyText(name: string) {
  return fc.oneof(
    { weight: 12, arbitrary: fc.constant(JSON.stringify(name)) },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
        .map(
          (escaped) =>
            `"${[...name].map((c, i) => (escaped[i] ? unitEscape(c.charCodeAt(0), i % 2 === 0) : c)).join('')}"`,
        ),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        JSON.stringify(name.toUpperCase()),
        JSON.stringify(` ${name}`),
        JSON.stringify(`${name}\u0000`),
        JSON.stringify(`${name}\u200b`),
      ),
    },
  );
}

/** Members a NewPlant does not have; some of them are forbidden whatever the rest says. */
const extraMember = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.tuple(
      fc.string({ maxLength: 8 }).map((k) => JSON.stringify(k)),
      jsonValueText,
    ),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(
      fc.constantFrom('"__proto__"', '"\\u005f_proto__"', '"constructor"', '"prototype"'),
      fc.constantFrom(
        '{}',
        '{"prototype":{}}',
        '{"prototype":null}',
        '"x"',
        '{"a":{"prototype":1}}',
        '[{"prototype":1}]',
        '{"isAdmin":true}',
      ),
    ),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(
      fc.constant('"nested"'),
      fc.constantFrom(
        '{"a":1,"a":2}',
        '{"a":{"__proto__":{}}}',
        '[{"constructor":{"prototype":1}}]',
        '{"a":1,"\\u0061":2}',
        '{"a":[{"b":1,"b":1}]}',
      ),
    ),
  },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.integer({ min: 0, max: 40 }), fc.boolean())
      .map(([depth, objects]) => [
        '"deep"',
        objects
          ? `${'{"d":'.repeat(depth)}0${'}'.repeat(depth)}`
          : `${'['.repeat(depth)}${']'.repeat(depth)}`,
      ]),
  },
);

const VALID_WHITESPACE = ['', '', '', ' ', '\n  ', '\t', '\r\n'];
const INVALID_WHITESPACE = ['\u00a0', '\v', '\f', '\u2028', '\u3000', '\u0000'];
const whitespace = fc.oneof(
  { weight: 30, arbitrary: fc.constantFrom(...VALID_WHITESPACE) },
  { weight: 1, arbitrary: fc.constantFrom(...INVALID_WHITESPACE) },
);

/** Near misses of a NewPlant, as the raw text of an object. */
export const newPlantText = fc
  .record({
    id: fc.option(fc.tuple(keyText('id'), idValueText), { freq: 12 }),
    name: fc.option(fc.tuple(keyText('name'), textValueText), { freq: 12 }),
    tag: fc.option(fc.tuple(keyText('tag'), textValueText), { freq: 2 }),
    extras: fc.array(extraMember, { maxLength: 3 }),
    repeats: fc.array(
      fc.constantFrom('id', 'name', 'tag').chain((name) => fc.tuple(keyText(name), textValueText)),
      { maxLength: 1 },
    ),
    gaps: fc.array(whitespace, { minLength: 4, maxLength: 4 }),
    breakage: fc.oneof(
      { weight: 30, arbitrary: fc.constant('none') },
      {
        weight: 1,
        arbitrary: fc.constantFrom('trailing comma', 'missing comma', 'garbage', 'array', 'bom'),
      },
    ),
  })
  .chain((parts) => {
    const members = [parts.id, parts.name, parts.tag, ...parts.extras, ...parts.repeats].filter(
      (member): member is [string, string] => member !== null,
    );
    return fc.shuffledSubarray(members, { minLength: members.length }).map((shuffled) => {
      const [a = '', b = '', c = '', d = ''] = parts.gaps;
      const separator = parts.breakage === 'missing comma' ? ' ' : `${c},${d}`;
      let text = `{${a}${shuffled.map(([key, value]) => `${key}${b}:${c}${value}`).join(separator)}${
        parts.breakage === 'trailing comma' ? ',' : ''
      }${d}}`;
      if (parts.breakage === 'garbage') text += ' }';
      if (parts.breakage === 'array') text = `[${text}]`;
      if (parts.breakage === 'bom') text = `\ufeff${text}`;
      return text;
    });
  });

/** A NewPlant that is valid, with a random int64 id (so, almost surely, a fresh one). */
export const validPlantText = fc
  .record({
    id: fc.bigInt({ min: INT64_MIN, max: INT64_MAX }),
    name: fc.string({ minLength: 1, maxLength: 40 }).filter((s) => !s.includes('\u0000')),
    tag: fc.option(
      fc.string({ maxLength: 20 }).filter((s) => !s.includes('\u0000')),
      { nil: undefined },
    ),
  })
  .map(({ id, name, tag }) => {
    const tagPart = tag === undefined ? '' : `,"tag":${JSON.stringify(tag)}`;
    return `{"id":${id},"name":${JSON.stringify(name)}${tagPart}}`;
  });

// ---- bytes ----

/** Byte sequences that are not UTF-8: overlong forms (C0 80 would be U+0000), CESU-8 surrogates, beyond U+10FFFF, truncated. */
const INVALID_UTF8 = [
  [0xc0, 0x80],
  [0xc1, 0xbf],
  [0xe0, 0x80, 0x80],
  [0xe0, 0x9f, 0xbf],
  [0xed, 0xa0, 0x80],
  [0xed, 0xbf, 0xbf],
  [0xf0, 0x80, 0x80, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xf5, 0x80, 0x80, 0x80],
  [0x80],
  [0xbf],
  [0xe2, 0x82],
  [0xf0, 0x9f, 0x8c],
  [0xfe],
  [0xff],
  [0xff, 0xfe],
];
/** And some that are, for contrast. */
const VALID_UTF8 = [
  [0xc2, 0x80],
  [0xe2, 0x82, 0xac],
  [0xef, 0xbf, 0xbf],
  [0xf0, 0x9f, 0x8c, 0xb5],
  [0xf4, 0x8f, 0xbf, 0xbf],
  [0xef, 0xbb, 0xbf],
];

const byteRun = fc.oneof(
  fc.constantFrom(...INVALID_UTF8, ...VALID_UTF8).map((bytes) => Buffer.from(bytes)),
  fc.uint8Array({ minLength: 1, maxLength: 4 }).map((bytes) => Buffer.from(bytes)),
);

type Mutation =
  | { kind: 'insert'; at: number; bytes: Buffer }
  | { kind: 'overwrite'; at: number; bytes: Buffer }
  | { kind: 'delete'; at: number; length: number }
  | { kind: 'truncate'; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: byteRun }),
  fc.record({ kind: fc.constant('overwrite' as const), at: fc.nat(), bytes: byteRun }),
  fc.record({
    kind: fc.constant('delete' as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 4 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
);

function mutate(body: Buffer, mutations: Mutation[]): Buffer {
  let bytes = body;
  for (const change of mutations) {
    const at = bytes.length === 0 ? 0 : change.at % (bytes.length + 1);
    if (change.kind === 'insert') {
      bytes = Buffer.concat([bytes.subarray(0, at), change.bytes, bytes.subarray(at)]);
    } else if (change.kind === 'overwrite') {
      bytes = Buffer.concat([
        bytes.subarray(0, at),
        change.bytes,
        bytes.subarray(at + change.bytes.length),
      ]);
    } else if (change.kind === 'delete') {
      bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + change.length)]);
    } else {
      bytes = bytes.subarray(0, at);
    }
  }
  return bytes;
}

/** Arbitrary bytes: random ones, and NewPlants with bytes inserted, overwritten, cut. */
export const arbitraryBytes = fc.oneof(
  fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes)),
  fc
    .tuple(
      fc.oneof(validPlantText, newPlantText),
      fc.array(mutation, { minLength: 1, maxLength: 3 }),
    )
    .map(([text, mutations]) => mutate(Buffer.from(text, 'utf8'), mutations)),
  // A name whose bytes hold one sequence, valid UTF-8 or not.
  fc
    .tuple(
      fc.bigInt({ min: INT64_MIN, max: INT64_MAX }),
      fc.constantFrom(...INVALID_UTF8, ...VALID_UTF8),
    )
    .map(([id, bytes]) =>
      Buffer.concat([Buffer.from(`{"id":${id},"name":"x`), Buffer.from(bytes), Buffer.from('"}')]),
    ),
);

// ---- headers ----

/** A character a real HTTP client can put in a header value: HTAB, visible ASCII, space, obs-text. */
const headerCharacter = fc
  .oneof(
    { weight: 10, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
    { weight: 1, arbitrary: fc.constant(0x09) },
    { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
  )
  .map((code) => String.fromCharCode(code));

export const headerText = (maxLength: number) =>
  fc.array(headerCharacter, { maxLength }).map((characters) => characters.join(''));

/** What a server receives: HTTP drops the spaces and tabs around a field value. */
const asReceived = (value: string) => value.replace(/^[ \t]+|[ \t]+$/g, '');

const digestEntryText = `sha256:${createHash('sha256').update(HASHED_TOKEN).digest('hex')}`;

const tokenText = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(TOKEN, HASHED_TOKEN) },
  {
    weight: 3,
    arbitrary: fc
      .tuple(fc.nat(TOKEN.length - 1), headerCharacter)
      .map(([at, c]) => `${TOKEN.slice(0, at)}${c}${TOKEN.slice(at + 1)}`),
  },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      TOKEN.toUpperCase(),
      TOKEN.slice(0, -1),
      `${TOKEN}x`,
      `x${TOKEN}`,
      `${TOKEN} ${TOKEN}`,
      `${TOKEN},${TOKEN}`,
      `"${TOKEN}"`,
      `${TOKEN}=`,
      `${TOKEN}\u00a0`,
      `\u00a0${TOKEN}`,
      `\t${TOKEN}`,
      `${TOKEN}\t\u00a0`,
      digestEntryText,
      '',
    ),
  },
  { weight: 2, arbitrary: headerText(40) },
  { weight: 1, arbitrary: fc.base64String({ maxLength: 44 }) },
);

const schemeText = fc.oneof(
  { weight: 6, arbitrary: fc.mixedCase(fc.constant('bearer')) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'Basic',
      'Digest',
      'Token',
      'Bearer:',
      'Bearerx',
      'Bear',
      'Bearer_',
      'Negotiate',
      'B\u00e9arer',
      '',
    ),
  },
  { weight: 1, arbitrary: headerText(10) },
);

const separatorText = fc.constantFrom(
  ' ',
  ' ',
  ' ',
  '  ',
  '   ',
  '\t',
  ' \t',
  '\t ',
  '',
  '\u00a0',
  ' \u00a0',
  ',',
  '=',
  ':',
);

/** Authorization header values, or none; as a server receives them. */
export const authorizationHeader: fc.Arbitrary<string | undefined> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .tuple(
        schemeText,
        separatorText,
        tokenText,
        fc.constantFrom('', '', '', ' ', '\t', '\u00a0', '\u0085', ',', ' x'),
      )
      .map((parts) => asReceived(parts.join(''))),
  },
  { weight: 2, arbitrary: headerText(60).map(asReceived) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

const JSON_CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/json;charset=UTF-8',
  'Application/JSON',
  'APPLICATION/JSON; CHARSET=UTF-8',
  'application/json; charset="utf-8"',
  'application/json; charset=utf8',
  'application/json ; charset=utf-8',
  'application/json;\tcharset=utf-8',
  'application/json; foo=bar',
  'application/json; charset=utf-8; foo=bar',
  'application/json; foo="bar"',
];

const OTHER_CONTENT_TYPES = [
  'text/plain',
  'text/json',
  'text/html; charset=utf-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=abc',
  'application/jsonp',
  'application/json-patch+json',
  'application/merge-patch+json',
  'application/ld+json',
  'application/javascript',
  'application/octet-stream',
  'application/xml',
  'application/*',
  '*/*',
  'json',
  'application',
  'application/',
  '/json',
  '',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'application/json; charset=iso-8859-1',
  'application/json; charset="utf-16"',
  'application/json; charset=us-ascii',
  'application/json; charset=utf-8; charset=latin1',
  'application/json; charset=',
  'application/json;',
  'application/json,text/plain',
  'application/json; q=0.5, text/plain',
];

/** Content-Type header values, or none; as a server receives them. */
export const contentTypeHeader: fc.Arbitrary<string | undefined> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...JSON_CONTENT_TYPES) },
  { weight: 4, arbitrary: fc.constantFrom(...OTHER_CONTENT_TYPES) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.mixedCase(fc.constant('application/json')), headerText(20))
      .map(([type, rest]) => asReceived(type + rest)),
  },
  { weight: 1, arbitrary: headerText(40).map(asReceived) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

/** A valid NewPlant padded by an extra member to a size around the body limit. */
export const bodyLimitPlantText = (limit: number) =>
  fc
    .tuple(fc.bigInt({ min: INT64_MIN, max: INT64_MAX }), fc.integer({ min: -3, max: 3 }))
    .map(([id, offset]) => {
      const head = `{"id":${id},"name":"padded","padding":"`;
      const tail = '"}';
      return `${head}${'.'.repeat(limit + offset - head.length - tail.length)}${tail}`;
    });
