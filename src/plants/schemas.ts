import { type Static, Type } from '@sinclair/typebox';
import { Int64, Text } from '../kinds.js';

export const NAME_MAX_LENGTH = 256;
export const TAG_MAX_LENGTH = 256;

const plantProperties = {
  name: Text({
    minLength: 1,
    maxLength: NAME_MAX_LENGTH,
    description: 'The name of the plant (well-formed Unicode, no U+0000)',
  }),
  tag: Type.Optional(
    Text({
      minLength: 0,
      maxLength: TAG_MAX_LENGTH,
      description: 'Tag to specify the type (well-formed Unicode, no U+0000)',
    }),
  ),
};

export const PlantSchema = Type.Object(plantProperties, {
  $id: 'Plant',
  description: 'A plant as stored; `tag` is absent when the plant has none',
});
export type Plant = Static<typeof PlantSchema>;

export const NewPlantSchema = Type.Object(
  {
    id: Int64({
      description:
        'Identification number of the plant, chosen by the client; any int64, stored exactly',
    }),
    ...plantProperties,
  },
  {
    $id: 'NewPlant',
    description:
      'A plant to create: all fields of Plant plus its id. Unknown properties are ignored',
  },
);
export type NewPlant = Static<typeof NewPlantSchema>;

export const StoredPlantSchema = Type.Object(
  {
    id: Int64({ description: 'Identification number of the plant, written with all its digits' }),
    ...plantProperties,
  },
  {
    $id: 'StoredPlant',
    description:
      'A plant as stored, with its id (a JSON integer, never rounded); `tag` is absent when the plant has none',
  },
);
export type StoredPlant = Static<typeof StoredPlantSchema>;

export const PAGE_LIMIT_MAX = 1000;
export const PAGE_LIMIT_DEFAULT = 100;

export const PlantIdParamsSchema = Type.Object({
  id: Int64({
    description: 'ID of the plant: an int64 in canonical decimal (0, or no leading zero, no +)',
  }),
});

export const PageQuerySchema = Type.Object({
  limit: Type.Optional(
    Type.Integer({
      format: 'int32',
      minimum: 1,
      maximum: PAGE_LIMIT_MAX,
      default: PAGE_LIMIT_DEFAULT,
      description: 'The maximum number of results to return',
    }),
  ),
  after: Type.Optional(
    Int64({ description: 'Return only plants whose id is greater than this one (keyset paging)' }),
  ),
  tag: Type.Optional(
    Text({
      minLength: 0,
      maxLength: TAG_MAX_LENGTH,
      description: 'Return only plants with exactly this tag (an empty value matches an empty tag)',
    }),
  ),
});
export type PageQuery = Static<typeof PageQuerySchema>;
