import { HttpError } from './errors.js';

/** A query component decoded as a form would encode it ('+' is a space); undefined if malformed. */
function decodeComponent(text: string): string | undefined {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    // A '%' without two hex digits after it, or bytes that are not UTF-8.
    return undefined;
  }
}

/** The raw query string of a request target: what follows its first '?'. */
export function queryStringOf(url: string): string {
  const start = url.indexOf('?');
  return start === -1 ? '' : url.slice(start + 1);
}

/** Reads one parameter's value; `where` names it for a 400 (`querystring/limit`). */
export type ParameterReader<T> = (value: string, where: string) => T;

/** A parameter taken as the text it is. */
export const asText: ParameterReader<string> = (value) => value;

/**
 * The parameters that `readers` names in `query`, each read by its reader as it comes, from the
 * raw query string rather than Fastify's parsed one, which keeps malformed percent-encoding as it
 * is and merges repeated parameters. Each may be given once (400 naming it otherwise); other
 * parameters are ignored whatever they hold.
 */
export function readQueryParameters<Readers extends Record<string, ParameterReader<unknown>>>(
  query: string,
  readers: Readers,
): { [Name in keyof Readers]?: ReturnType<Readers[Name]> } {
  const values: Record<string, unknown> = {};
  if (query === '') return values as never;
  for (const pair of query.split('&')) {
    const equals = pair.indexOf('=');
    const name = decodeComponent(equals === -1 ? pair : pair.slice(0, equals));
    const read = name === undefined || !Object.hasOwn(readers, name) ? undefined : readers[name];
    if (name === undefined || read === undefined) continue;
    const where = `querystring/${name}`;
    if (name in values) throw new HttpError(400, `${where} must not be given more than once`);
    const value = decodeComponent(equals === -1 ? '' : pair.slice(equals + 1));
    if (value === undefined) throw new HttpError(400, `${where} must be percent-encoded UTF-8`);
    values[name] = read(value, where);
  }
  return values as never;
}

/** A page size of `text`: canonical decimal from 1 to `max`; a 400 naming `where` otherwise. */
export function parseLimit(text: string, max: number, example: number, where: string): number {
  const limit = /^[1-9][0-9]{0,5}$/.test(text) ? Number(text) : Number.NaN;
  if (!(limit >= 1 && limit <= max)) {
    throw new HttpError(400, `${where} must be an integer from 1 to ${max}, such as ${example}`);
  }
  return limit;
}
