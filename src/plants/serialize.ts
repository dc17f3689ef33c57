import type { StoredPlant } from './schemas.js';

/**
 * A stored plant as JSON text. JSON.stringify cannot write a bigint and a number would round it,
 * so the id is written as its decimal digits, a JSON integer; the strings are escaped by
 * JSON.stringify, and `tag` is left out when the plant has none.
 */
export function storedPlantJson({ id, name, tag }: StoredPlant): string {
  return plantJson(id, name, tag);
}

/** As storedPlantJson, the id given as a bigint or as its canonical decimal digits. */
export function plantJson(id: bigint | string, name: string, tag: string | undefined): string {
  const tagMember = tag === undefined ? '' : `,"tag":${JSON.stringify(tag)}`;
  return `{"id":${id},"name":${JSON.stringify(name)}${tagMember}}`;
}
