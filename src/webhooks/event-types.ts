/** The names of the event types an endpoint may receive, in the catalog's order. */
export const EVENT_TYPE_NAMES = [
  'newPlant',
  'plantDeleted',
  'endpointDisabled',
  'deliveryExhausted',
] as const;

export type EventTypeName = (typeof EVENT_TYPE_NAMES)[number];

/** What an endpoint receives when nothing else is said. */
export const DEFAULT_EVENT_TYPES: readonly EventTypeName[] = ['newPlant'];

export const isEventTypeName = (name: unknown): name is EventTypeName =>
  typeof name === 'string' && (EVENT_TYPE_NAMES as readonly string[]).includes(name);
