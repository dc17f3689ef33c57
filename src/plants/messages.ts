// The messages the plant API answers its own failures with; its examples take them from here.

export const noPlantMessage = (id: bigint | number) => `no plant has the id ${id}`;
export const plantConflictMessage = (id: bigint | number) =>
  `a plant with id ${id} already exists with a different name or tag`;
