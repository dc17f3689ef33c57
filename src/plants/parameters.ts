import { HttpError } from '../http/errors.js';
import { INT64_MAX, INT64_MIN } from '../kinds.js';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, type PageQuery } from './schemas.js';

// 0, or digits without a leading zero after an optional minus: one spelling for each integer.
const canonicalInteger = /^(?:0|-?[1-9][0-9]*)$/;

/** The int64 that `text` spells in canonical decimal; a 400 naming `where` otherwise. */
export function parseInt64(text: string, where: string): bigint {
  if (!canonicalInteger.test(text)) {
    throw new HttpError(
      400,
      `${where} must be an integer in canonical decimal form, such as 42 or -7`,
    );
  }
  const value = BigInt(text);
  if (value < INT64_MIN || value > INT64_MAX) {
    throw new HttpError(400, `${where} must be an integer in the int64 range`);
  }
  return value;
}

function parseLimit(text: string): number {
  const limit = canonicalInteger.test(text) ? Number(text) : Number.NaN;
  if (!(limit >= 1 && limit <= PAGE_LIMIT_MAX)) {
    throw new HttpError(
      400,
      `querystring/limit must be an integer from 1 to ${PAGE_LIMIT_MAX}, such as ${PAGE_LIMIT_DEFAULT}`,
    );
  }
  return limit;
}

/** A query component decoded as a form would encode it ('+' is a space); undefined if malformed. */
function decodeComponent(text: string): string | undefined {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    // A '%' without two hex digits after it, or bytes that are not UTF-8.
    return undefined;
  }
}

const pageParameters = new Set(['limit', 'after', 'tag']);

/**
 * The parameters of a page request, read from the raw query string rather than Fastify's parsed
 * one, which keeps malformed percent-encoding as it is and merges repeated parameters. Each
 * parameter may be given once; unknown parameters are ignored whatever they hold.
 */
export function parsePageQuery(query: string): PageQuery {
  const page: PageQuery = {};
  for (const pair of query.split('&')) {
    const equals = pair.indexOf('=');
    const name = decodeComponent(equals === -1 ? pair : pair.slice(0, equals));
    if (name === undefined || !pageParameters.has(name)) continue;
    const where = `querystring/${name}`;
    if (name in page) throw new HttpError(400, `${where} must not be given more than once`);
    const value = decodeComponent(equals === -1 ? '' : pair.slice(equals + 1));
    if (value === undefined) {
      throw new HttpError(400, `${where} must be percent-encoded UTF-8`);
    }
    if (name === 'limit') page.limit = parseLimit(value);
    else if (name === 'after') page.after = parseInt64(value, where);
    else page.tag = value;
  }
  return page;
}
