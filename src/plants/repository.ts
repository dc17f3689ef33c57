import { eq } from 'drizzle-orm';
import type { Database } from '../db/client.js';
import { translateDatabaseError } from '../db/errors.js';
import { plants } from '../db/schema.js';
import type { NewPlant, Plant } from './schemas.js';

export type CreatePlantResult =
  /** The plant was stored by this call. */
  | { outcome: 'created'; plant: Plant }
  /** A plant with this id and the same name and tag was already stored. */
  | { outcome: 'replayed'; plant: Plant }
  /** A plant with this id but another name or tag is stored; nothing changed. */
  | { outcome: 'conflict'; plant: Plant };

export interface PlantRepository {
  /** Stores the plant unless its id exists; resolves once the outcome is durable. */
  createPlant(plant: NewPlant): Promise<CreatePlantResult>;
}

export function toPlant(row: { name: string; tag: string | null }): Plant {
  return row.tag === null ? { name: row.name } : { name: row.name, tag: row.tag };
}

export function samePlant(stored: Plant, wanted: NewPlant): boolean {
  return stored.name === wanted.name && stored.tag === wanted.tag;
}

/** One INSERT ... ON CONFLICT DO NOTHING per call, and a SELECT when the id exists. */
export function createDrizzlePlantRepository(db: Database): PlantRepository {
  const columns = { name: plants.name, tag: plants.tag };

  async function createPlant(plant: NewPlant): Promise<CreatePlantResult> {
    const inserted = await db
      .insert(plants)
      .values({ id: plant.id, name: plant.name, tag: plant.tag ?? null })
      .onConflictDoNothing({ target: plants.id })
      .returning(columns);
    if (inserted[0]) return { outcome: 'created', plant: toPlant(inserted[0]) };

    // ON CONFLICT waited for any concurrent inserter of this id to commit, so the row is visible.
    const [existing] = await db.select(columns).from(plants).where(eq(plants.id, plant.id));
    if (!existing) return createPlant(plant); // deleted in between: try again
    const stored = toPlant(existing);
    return { outcome: samePlant(stored, plant) ? 'replayed' : 'conflict', plant: stored };
  }

  return {
    createPlant: (plant) => createPlant(plant).catch(translateDatabaseError),
  };
}
