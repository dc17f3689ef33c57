/**
 * The public ids of endpoints (`ep_`) and of attempts (`att_`): a prefix and the row's bigint
 * key as 16 hex digits, so that ids sort as text in the order of their rows and a page's
 * `after` names a row. They are counters: an id shows the order and rough count of creations.
 */
const HEX_DIGITS = 16;

function format(prefix: string, key: bigint | string): string {
  return prefix + BigInt(key).toString(16).padStart(HEX_DIGITS, '0');
}

function parse(prefix: string, id: string): bigint | undefined {
  if (id.length !== prefix.length + HEX_DIGITS || !id.startsWith(prefix)) return undefined;
  const digits = id.slice(prefix.length);
  return /^[0-9a-f]+$/.test(digits) ? BigInt(`0x${digits}`) : undefined;
}

export const endpointIdOf = (key: bigint | string) => format('ep_', key);
export const attemptIdOf = (key: bigint | string) => format('att_', key);
/** The row key of an endpoint id; undefined when it is not one. */
export const endpointKeyOf = (id: string) => parse('ep_', id);
export const attemptKeyOf = (id: string) => parse('att_', id);
