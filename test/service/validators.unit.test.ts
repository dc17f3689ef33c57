// Each hand-written check and the schema that states the same rule accept the same values.
// A Checked kind's TypeBox check is its hand-written function, so what it is compared with is
// the JSON Schema the OpenAPI document publishes, compiled with ajv (formats are not checked:
// ajv has none built in). The query readers are compared with the TypeBox schema the service
// then checks their values with. Where a schema cannot state a part of the rule, the property
// names that part.
import { Value } from '@sinclair/typebox/value';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EnvironmentSchema } from '../../src/config.js';
import { parseLimit } from '../../src/http/query.js';
import { checkedProblem, INT64_MAX, INT64_MIN, textProblem } from '../../src/kinds.js';
import { parsePageQuery } from '../../src/plants/parameters.js';
import { NewPlantSchema, PageQuerySchema } from '../../src/plants/schemas.js';
import { endpointKey } from '../../src/webhooks/api/parameters.js';
import {
  AttemptPageQuerySchema,
  CustomHeadersSchema,
  EndpointPageQuerySchema,
  EndpointPatchSchema,
  EndpointTestSchema,
  NewEndpointSchema,
  SigningKeySchema,
} from '../../src/webhooks/api/schemas.js';
import { EVENT_TYPE_NAMES } from '../../src/webhooks/catalog/event-types.js';
import { isReservedHeader } from '../../src/webhooks/security/custom-headers.js';
import {
  isEndpointSecret,
  SECRET_MAX_BYTES,
  SECRET_MIN_BYTES,
} from '../../src/webhooks/security/secrets.js';
import { readWebhookSettings } from '../../src/webhooks/settings.js';

const RUNS = { numRuns: 300 };

const ajv = new Ajv2020({
  strict: false,
  formats: { int32: true, int64: true, uri: true, 'date-time': true },
});

/** The published JSON Schema of a property: TypeBox's symbols (its kinds) dropped. */
function published(schema: unknown): (value: unknown) => boolean {
  const validate = ajv.compile(JSON.parse(JSON.stringify(schema)));
  return (value) => validate(value) === true;
}

/** True when the hand-written check of the Checked kind of `schema` accepts `value`. */
function handWritten(schema: object): (value: unknown) => boolean {
  const kind = (schema as Record<symbol, unknown>)[Symbol.for('TypeBox.Kind')];
  // checkedProblem finds nothing wrong under a kind it does not know.
  if (checkedProblem(kind, 'probe') === undefined && checkedProblem(kind, 0) === undefined) {
    throw new Error(`${String(kind)} is not a Checked kind`);
  }
  return (value) => checkedProblem(kind, value) === undefined;
}

const otherJson = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  fc.string(),
  fc.array(fc.string(), { maxLength: 2 }),
  fc.dictionary(fc.string(), fc.string(), { maxKeys: 2 }),
);

/** A string of `length` code points, some astral (two UTF-16 units each). */
const codePoints = (length: fc.Arbitrary<number>) =>
  fc
    .tuple(length, fc.array(fc.constantFrom('a', '/', 'é', '😀'), { minLength: 1, maxLength: 8 }))
    .map(([n, cycle]) => Array.from({ length: n }, (_, i) => cycle[i % cycle.length]).join(''));

const around = (...edges: number[]) =>
  fc.oneof(...edges.map((edge) => fc.integer({ min: Math.max(0, edge - 2), max: edge + 2 })));

describe('the signing key', () => {
  const bytes = fc.oneof(
    around(0, 1, SECRET_MIN_BYTES, SECRET_MAX_BYTES),
    fc.integer({ min: 0, max: 100 }),
  );
  const key = fc
    .tuple(bytes, fc.nat())
    .map(([length, seed]) => Buffer.alloc(length, seed % 256).toString('base64'));
  /** A key as written, or damaged where a hand-written check could slip. */
  const written = fc.oneof(
    key.map((encoded) => `whsec_${encoded}`),
    fc
      .tuple(key, fc.constantFrom('=', '==', '===', 'A', '-', '_', ' ', '\n', 'é'), fc.nat())
      .map(([encoded, extra, at]) => {
        const i = at % (encoded.length + 1);
        return `whsec_${encoded.slice(0, i)}${extra}${encoded.slice(i)}`;
      }),
    key.map((encoded) => `whsec_${encoded.replace(/=+$/, '')}`),
    key.map((encoded) => `WHSEC_${encoded}`),
    key.map((encoded) => encoded),
    fc.string().map((text) => `whsec_${text}`),
  );

  // The published pattern states the form (whsec_ and base64's alphabet); the key's length, 24 to
  // 64 bytes, is in its description, and base64's padding is the hand-written check's alone.
  it('is accepted by the API as its published schema says, its length and padding aside', () => {
    const schema = published(SigningKeySchema.properties.key);
    const check = handWritten(SigningKeySchema.properties.key);
    const keyOf = (value: string) => value.slice('whsec_'.length);
    const canonical = (value: string) =>
      Buffer.from(keyOf(value), 'base64').toString('base64') === keyOf(value);
    const inRange = (value: string) => {
      const length = Buffer.from(keyOf(value), 'base64').length;
      return length >= SECRET_MIN_BYTES && length <= SECRET_MAX_BYTES;
    };
    fc.assert(
      fc.property(fc.oneof(written, otherJson), (value) => {
        const shown = typeof value === 'string' && canonical(value) && inRange(value);
        expect(check(value)).toBe(schema(value) && shown);
        if (typeof value === 'string') expect(isEndpointSecret(value)).toBe(check(value));
      }),
      RUNS,
    );
  });

  it('is accepted by WEBHOOK_SECRET in the same form, of any length but none', () => {
    const environment = Value.Default(EnvironmentSchema, {}) as never;
    const accepted = (value: string) => {
      try {
        readWebhookSettings({ ...(environment as object), WEBHOOK_SECRET: value } as never);
        return true;
      } catch {
        return false;
      }
    };
    fc.assert(
      fc.property(written, (value) => {
        const length = Buffer.from(value.slice('whsec_'.length), 'base64').length;
        if (length >= SECRET_MIN_BYTES && length <= SECRET_MAX_BYTES) {
          expect(accepted(value)).toBe(isEndpointSecret(value));
        }
      }),
      RUNS,
    );
    fc.assert(
      fc.property(key, (encoded) => {
        expect(accepted(`whsec_${encoded}`)).toBe(encoded !== '');
      }),
      RUNS,
    );
  });
});

const eventName = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...EVENT_TYPE_NAMES) },
  fc.constantFrom(...EVENT_TYPE_NAMES).map((name) => name.toUpperCase()),
  fc.constantFrom(...EVENT_TYPE_NAMES).map((name) => `${name} `),
  fc.constantFrom('', 'newplant', 'plant', '*'),
  fc.string({ maxLength: 12 }),
);

describe('the event types', () => {
  const lists = fc.oneof(fc.array(eventName, { maxLength: 5 }), otherJson);

  it('of an endpoint are accepted as its published schema says', () => {
    for (const schema of [
      NewEndpointSchema.properties.events,
      EndpointPatchSchema.properties.events,
    ]) {
      const [check, valid] = [handWritten(schema), published(schema)];
      fc.assert(
        fc.property(lists, (value) => {
          expect(check(value)).toBe(valid(value));
        }),
        RUNS,
      );
    }
  });

  it('of WEBHOOK_EVENTS are accepted as the schema of an endpoint’s says', () => {
    const valid = published(NewEndpointSchema.properties.events);
    const environment = Value.Default(EnvironmentSchema, {}) as object;
    const accepted = (value: string) => {
      try {
        readWebhookSettings({ ...environment, WEBHOOK_EVENTS: value } as never);
        return true;
      } catch {
        return false;
      }
    };
    // The setting splits on commas and trims each entry: names that survive both.
    const name = eventName.filter(
      (text) => text.trim() === text && text !== '' && !text.includes(','),
    );
    fc.assert(
      fc.property(fc.array(name, { maxLength: 5 }), (names) => {
        expect(accepted(names.join(','))).toBe(valid(names));
      }),
      RUNS,
    );
  });

  it('of a test is one name, as its published schema says', () => {
    const schema = EndpointTestSchema.properties.eventType;
    const [check, valid] = [handWritten(schema), published(schema)];
    fc.assert(
      fc.property(fc.oneof(eventName, otherJson), (value) => {
        expect(check(value)).toBe(valid(value));
      }),
      RUNS,
    );
  });
});

describe('the rate limit', () => {
  it('is accepted as its published schema says, a bigint as the number it reads as', () => {
    const schema = NewEndpointSchema.properties.rateLimit;
    const [check, valid] = [handWritten(schema), published(schema)];
    const value = fc.oneof(
      around(0, 1, 10_000)
        .map((n) => [n, -n])
        .chain((pair) => fc.constantFrom(...pair)),
      around(0, 1, 10_000).map(BigInt),
      fc.double({ min: -1, max: 10_002 }),
      fc.bigInt({ min: INT64_MIN, max: INT64_MAX }),
      otherJson,
    );
    fc.assert(
      fc.property(value, (v) => {
        expect(check(v)).toBe(valid(typeof v === 'bigint' ? Number(v) : v));
      }),
      RUNS,
    );
  });
});

describe('an attempt status', () => {
  it('is accepted as its published schema says', () => {
    const schema = AttemptPageQuerySchema.properties.status;
    const [check, valid] = [handWritten(schema), published(schema)];
    const value = fc.oneof(
      fc.constantFrom('succeeded', 'failed', 'Failed', 'failed ', 'pending', ''),
      otherJson,
    );
    fc.assert(
      fc.property(value, (v) => {
        expect(check(v)).toBe(valid(v));
      }),
      RUNS,
    );
  });
});

/** U+0000 and lone surrogates: PostgreSQL cannot store the one, JSON Schema cannot forbid the other. */
const unstorable = (value: unknown) =>
  typeof value === 'string' && (value.includes('\u0000') || !value.isWellFormed());

describe('text', () => {
  const text = (max: number) =>
    fc.oneof(
      codePoints(around(0, 1, max)),
      codePoints(around(max)).map((t) => `${t.slice(0, -1)}\u0000`),
      codePoints(around(1, max)).map((t) => `\ud800${t}`),
      fc.string({
        unit: fc.constantFrom('a', '\u0000', '\ud800', '\udc00', '😀', '\uffff'),
        maxLength: 8,
      }),
    );

  it.each([
    ['a plant’s name', NewPlantSchema.properties.name, 256],
    ['a plant’s tag', NewPlantSchema.properties.tag, 256],
    ['an endpoint’s description', NewEndpointSchema.properties.description, 1024],
  ])(
    'of %s is accepted as its published schema says, but for what cannot be stored',
    (_, schema, max) => {
      const valid = published(schema);
      fc.assert(
        fc.property(fc.oneof(text(max), otherJson), (value) => {
          const accepted = textProblem(schema as never, value) === undefined;
          expect(accepted).toBe(valid(value) && !unstorable(value));
        }),
        RUNS,
      );
    },
  );

  it('of a description patch is accepted as its published schema says, null included', () => {
    const schema = EndpointPatchSchema.properties.description;
    const [check, valid] = [handWritten(schema), published(schema)];
    fc.assert(
      fc.property(fc.oneof(text(1024), otherJson), (value) => {
        expect(check(value)).toBe(valid(value) && !unstorable(value));
      }),
      RUNS,
    );
  });
});

describe('an endpoint URL', () => {
  const schema = NewEndpointSchema.properties.url;
  const [check, valid] = [handWritten(schema), published(schema)];
  const origin = 'https://example.com/';
  const nearTheLimit = codePoints(around(2048 - origin.length)).map((path) => origin + path);

  it('is accepted, when nothing but its length is in question, as its published schema says', () => {
    fc.assert(
      fc.property(nearTheLimit, (value) => {
        expect(check(value)).toBe(valid(value));
      }),
      RUNS,
    );
  });

  it('is accepted only within its published schema', () => {
    const others = fc.oneof(
      fc
        .tuple(
          fc.constantFrom('http://', 'https://', 'HTTP://', 'ftp://', 'mailto:', ''),
          fc.constantFrom('', 'user@', 'user:pw@', ':@'),
          fc.constantFrom('example.com', '127.0.0.1', '[::1]', '', 'xn--bcher-kva.example', 'a b'),
          fc.string({
            unit: fc.constantFrom('/', 'a', '%', '?', '#', ' ', '\t', 'é', ','),
            maxLength: 8,
          }),
        )
        .map((parts) => parts.join('')),
      fc.constantFrom('http://user:pw@example.com/', 'ftp://example.com/', 'http:///x', 'urn:x:y'),
      otherJson,
    );
    fc.assert(
      fc.property(fc.oneof(nearTheLimit, others), (value) => {
        if (check(value)) expect(valid(value)).toBe(true);
      }),
      RUNS,
    );
  });
});

describe('custom headers', () => {
  const schema = CustomHeadersSchema.properties.headers;
  const [check, valid] = [handWritten(schema), published(schema)];
  const tokenCharacter = fc.constantFrom(..."!#$%&'*+-.^_`|~09AZaz".split(''), ' ', ':', 'é');
  const name = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom('X-Tenant', 'x-tenant', 'Authorization', 'a') },
    fc.constantFrom('Host', 'CONNECTION', 'Webhook-Id', 'content-type', 'Expect', 'Keep-Alive'),
    fc.array(tokenCharacter, { minLength: 0, maxLength: 4 }).map((a) => `X-${a.join('')}`),
    around(128).map((n) => 'h'.repeat(n)),
    fc.constant(''),
  );
  const valueText = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.string({ unit: fc.constantFrom('a', ' ', '\t', '~'), maxLength: 6 }),
    },
    fc.constantFrom('a\r\nb', 'a\u0000', 'é', '\u007f'),
    around(4096, 3000).map((n) => 'v'.repeat(n)),
  );
  const headers = fc.oneof(
    fc.dictionary(name, valueText, { maxKeys: 4 }),
    fc.dictionary(
      fc.integer({ min: 0, max: 99 }).map((n) => `X-${n}`),
      fc.constant('v'),
      { minKeys: 18, maxKeys: 22 },
    ),
    fc.dictionary(name, fc.oneof(valueText, otherJson), { maxKeys: 3 }),
    otherJson,
  );
  /** What the schema cannot say: names it reserves, names twice in another case, the total. */
  const beyondTheSchema = (value: unknown) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
    const names = Object.keys(value).map((n) => n.toLowerCase());
    const reserved = names.some(isReservedHeader);
    const total = Object.entries(value).reduce(
      (sum, [n, v]) => sum + n.length + (typeof v === 'string' ? v.length : 0),
      0,
    );
    return reserved || new Set(names).size !== names.length || total > 8192;
  };

  it('are accepted as their published schema says, but for what it cannot say', () => {
    fc.assert(
      fc.property(headers, (value) => {
        expect(check(value)).toBe(valid(value) && !beyondTheSchema(value));
      }),
      RUNS,
    );
  });
});

/** A decimal spelling of `n`, canonical or not. */
const spelled = (n: fc.Arbitrary<bigint>) =>
  fc.tuple(n, fc.constantFrom('', '0', '+', ' ', '.0', 'e0')).map(([value, twist]) => {
    const text = value.toString();
    if (twist === '' || twist === ' ') return text + twist;
    if (twist === '.0' || twist === 'e0') return text + twist;
    return text.startsWith('-') ? `-${twist}${text.slice(1)}` : twist + text;
  });
const canonical = (text: string) => /^-?\d+$/.test(text) && BigInt(text).toString() === text;
const aroundBig = (...edges: bigint[]) =>
  fc.oneof(...edges.map((edge) => fc.bigInt({ min: edge - 2n, max: edge + 2n })));

describe('query parameters', () => {
  const accepts = (read: () => unknown) => {
    try {
      read();
      return true;
    } catch {
      return false;
    }
  };

  it('limit of a page of plants: canonical decimal of what the schema accepts', () => {
    fc.assert(
      fc.property(spelled(aroundBig(0n, 1000n, 2n ** 31n)), (text) => {
        const valid = canonical(text) && Value.Check(PageQuerySchema, { limit: Number(text) });
        expect(accepts(() => parsePageQuery(`limit=${encodeURIComponent(text)}`))).toBe(valid);
      }),
      RUNS,
    );
  });

  it('after of a page of plants: canonical decimal of what the schema accepts', () => {
    fc.assert(
      fc.property(spelled(aroundBig(0n, INT64_MAX, INT64_MIN)), (text) => {
        const valid = canonical(text) && Value.Check(PageQuerySchema, { after: BigInt(text) });
        expect(accepts(() => parsePageQuery(`after=${encodeURIComponent(text)}`))).toBe(valid);
      }),
      RUNS,
    );
  });

  it.each([
    ['endpoints', EndpointPageQuerySchema],
    ['attempts', AttemptPageQuerySchema],
  ])('limit of a page of %s: canonical decimal of what the schema accepts', (_, schema) => {
    fc.assert(
      fc.property(spelled(aroundBig(0n, 100n, 1_000_000n)), (text) => {
        const valid = canonical(text) && Value.Check(schema, { limit: Number(text) });
        expect(accepts(() => parseLimit(text, 100, 50, 'querystring/limit'))).toBe(valid);
      }),
      RUNS,
    );
  });

  it('after of a page of endpoints: an id the schema accepts, whose key is a row key', () => {
    const id = fc.oneof(
      aroundBig(0n, INT64_MAX, 2n ** 64n - 1n).map(
        (key) => `ep_${key.toString(16).padStart(16, '0')}`,
      ),
      fc.stringMatching(/^ep_[0-9a-fA-F]{15,17}$/),
    );
    fc.assert(
      fc.property(id, (text) => {
        // The pattern gives the form of an id; keys 0 and above INT64_MAX are no endpoint's.
        const key = /^ep_[0-9a-f]{16}$/.test(text) ? BigInt(`0x${text.slice(3)}`) : -1n;
        const valid = Value.Check(EndpointPageQuerySchema, { after: text });
        expect(endpointKey(text) !== undefined).toBe(valid && key >= 1n && key <= INT64_MAX);
      }),
      RUNS,
    );
  });
});
