import type { EventTypeName } from './event-types.js';

// The bodies a test of an endpoint sends: an example of each event type, as the real events of
// that type are written (compact JSON, in the same key order), so a receiver can try its parsing
// and its signature check on one before any real event comes.

const plant = { id: 9007199254740991, name: 'Monstera', tag: 'aroid' };

/** The `data` of each enveloped type's example, stamped with `timestamp`. */
const data: Record<Exclude<EventTypeName, 'newPlant'>, (timestamp: string) => object> = {
  plantDeleted: () => plant,
  endpointDisabled: (timestamp) => ({
    endpointId: 'ep_0000000000000001',
    url: 'https://receiver.example.com/plants',
    reason: 'the receiver answered 410 Gone',
    disabledAt: timestamp,
  }),
  deliveryExhausted: () => ({
    endpointId: 'ep_0000000000000001',
    eventId: 'msg_2b8a1f0c6e9d4c1ab3f57e0d9c4a8b21',
    eventType: 'newPlant',
    attempts: 8,
    lastError: 'the receiver answered 503',
  }),
};

/**
 * The body of a test event of `type` made at `at`: newPlant's is a Plant, as the source document
 * defines that webhook; every other type's the Standard Webhooks envelope
 * `{"type", "timestamp", "data"}`.
 */
export function testEventBody(type: EventTypeName, at: Date): string {
  if (type === 'newPlant') return JSON.stringify(plant);
  const timestamp = at.toISOString();
  return JSON.stringify({ type, timestamp, data: data[type](timestamp) });
}
