import { type KeyRing, openSecret, SecretUnavailableError, sealSecret } from './secrets.js';

/** An endpoint's custom headers: sent with every delivery to it, after the service's own. */
export type CustomHeaders = Record<string, string>;

/** How many custom headers an endpoint may have. */
export const CUSTOM_HEADERS_MAX = 20;
export const HEADER_NAME_MAX_LENGTH = 128;
/** Room for a bearer token or a signed JWT. */
export const HEADER_VALUE_MAX_LENGTH = 4096;
/**
 * The names and values of an endpoint's headers, all together, in characters: with the
 * service's own headers they stay within what common servers accept of a request's headers
 * (8 KiB a line for nginx and Apache, 16 KiB in all for Node.js).
 */
export const CUSTOM_HEADERS_MAX_LENGTH = 8192;

/** An HTTP token (RFC 9110 §5.6.2): the form of every field name. */
const token = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Visible ASCII, spaces and tabs; no CR, LF, NUL or other control, no byte above 0x7e. */
const printable = /^[\t\x20-\x7e]*$/;

/**
 * The names the service writes itself, or that the HTTP client it sends with refuses
 * (`keep-alive`, `upgrade`, `expect`): a receiver must be able to trust the first, and the
 * others would fail every attempt.
 */
const RESERVED_NAMES = new Set([
  'host',
  'connection',
  'transfer-encoding',
  'user-agent',
  'keep-alive',
  'upgrade',
  'expect',
]);
const RESERVED_PREFIXES = ['webhook-', 'content-'];

/** The reserved names, as a refusal lists them. */
export const RESERVED_HEADERS = [
  ...RESERVED_PREFIXES.map((prefix) => `${prefix}*`),
  ...RESERVED_NAMES,
].join(', ');

/** A name as an error message quotes it: a name is not a secret, but it may be long. */
const quoted = (name: string) =>
  JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}...` : name);

/** A header name (in lower case) that the service sets itself, so an endpoint may not. */
export const isReservedHeader = (lowerCase: string) =>
  RESERVED_NAMES.has(lowerCase) || RESERVED_PREFIXES.some((prefix) => lowerCase.startsWith(prefix));

/**
 * What is wrong with `value` as an endpoint's custom headers, in words that follow the field's
 * name and name the header at fault; undefined when nothing is. Never quotes a value.
 */
export function customHeadersProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'must be a JSON object of header names and their values';
  }
  const entries = Object.entries(value);
  if (entries.length > CUSTOM_HEADERS_MAX) {
    return `must hold at most ${CUSTOM_HEADERS_MAX} headers`;
  }
  const seen = new Set<string>();
  let length = 0;
  for (const [name, text] of entries) {
    if (name.length > HEADER_NAME_MAX_LENGTH || !token.test(name)) {
      return `must have names that are HTTP tokens (letters, digits and !#$%&'*+-.^_\`|~) of at most ${HEADER_NAME_MAX_LENGTH} characters: ${quoted(name)} is not`;
    }
    const lowerCase = name.toLowerCase();
    if (isReservedHeader(lowerCase)) {
      return `must not set ${quoted(name)}: the service sets ${RESERVED_HEADERS} itself`;
    }
    if (seen.has(lowerCase)) {
      return `must not name ${quoted(name)} twice: header names are case-insensitive`;
    }
    seen.add(lowerCase);
    if (typeof text !== 'string') return `must give ${quoted(name)} a string value`;
    if (
      text.length > HEADER_VALUE_MAX_LENGTH ||
      !printable.test(text) ||
      /^[\t ]|[\t ]$/.test(text)
    ) {
      return `must give ${quoted(name)} a value of at most ${HEADER_VALUE_MAX_LENGTH} printable ASCII characters, spaces and tabs, none of them leading or trailing`;
    }
    length += name.length + text.length;
  }
  if (length > CUSTOM_HEADERS_MAX_LENGTH) {
    return `must hold names and values of at most ${CUSTOM_HEADERS_MAX_LENGTH} characters in all`;
  }
  return undefined;
}

const placeOf = (endpoint: string) => ({ endpoint, field: 'headers' }) as const;

/** How an endpoint's headers are stored: sealed for its row (see secrets.ts); null for none. */
export function sealHeaders(headers: CustomHeaders, keys: KeyRing, endpoint: string) {
  if (Object.keys(headers).length === 0) return null;
  return sealSecret(JSON.stringify(headers), keys, placeOf(endpoint));
}

/**
 * The headers a stored value holds, in the order they were given. Throws
 * SecretUnavailableError, whose message never holds a value, when it does not open for this
 * endpoint or what it opens to is not valid headers.
 */
export function openHeaders(sealed: string | null, keys: KeyRing, endpoint: string): CustomHeaders {
  if (sealed === null) return {};
  const text = openSecret(sealed, keys, placeOf(endpoint));
  let headers: unknown;
  try {
    headers = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the text.
    headers = undefined;
  }
  if (customHeadersProblem(headers) !== undefined) {
    throw new SecretUnavailableError(
      `the custom headers stored for endpoint ${endpoint} are not a valid set of headers`,
    );
  }
  return headers as CustomHeaders;
}
