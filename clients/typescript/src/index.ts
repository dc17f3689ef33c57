export type {
  NewPlant,
  Plant,
  StoredPlant,
} from './generated/types.gen.js';
export {
  type ErrorBody,
  type PlantPage,
  type PlantQuery,
  PlantStore,
  PlantStoreError,
  type PlantStoreOptions,
} from './plant-store.js';
