import { type Static, Type } from '@sinclair/typebox';
import { Int64, Text } from '../http/validation.js';

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
