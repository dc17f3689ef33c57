import { HttpError } from '../http/errors.js';
import { asText, parseLimit, readQueryParameters } from '../http/query.js';
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

/**
 * The parameters of a page request, each checked as it comes (see readQueryParameters); unknown
 * parameters are ignored whatever they hold.
 */
export function parsePageQuery(query: string): PageQuery {
  return readQueryParameters(query, {
    limit: (value, where) => parseLimit(value, PAGE_LIMIT_MAX, PAGE_LIMIT_DEFAULT, where),
    after: parseInt64,
    tag: asText,
  });
}
