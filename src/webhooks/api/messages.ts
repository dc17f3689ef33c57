// The messages the management API answers its own failures with; its documentation's examples
// take them from here (see examples.ts).
import { ENDPOINT_ID_FORM } from '../tables/ids.js';

/** What every management request answers while no admin token is configured, and the start log says. */
export const MANAGEMENT_OFF_MESSAGE =
  'the webhook management API is off: no admin token is configured; set ADMIN_TOKENS (or ADMIN_TOKENS_FILE) to turn it on';
export const NO_ENDPOINT_MESSAGE = 'no webhook endpoint has this id';
export const MALFORMED_ENDPOINT_ID_MESSAGE = `${NO_ENDPOINT_MESSAGE}: endpoint ids are ${ENDPOINT_ID_FORM}`;
export const UNKNOWN_EVENT_MESSAGE = 'this endpoint has no event with this id in its attempt log';
export const DISABLED_MESSAGE =
  'the endpoint is disabled: enable it (PATCH disabled false) before recovering';
export const DISABLED_SEND_MESSAGE =
  'the endpoint is disabled: enable it (PATCH disabled false) before sending to it';
export const CONFIGURED_MESSAGE =
  'the endpoint is declared by WEBHOOK_URLS: change that setting to change or remove it';
export const NOT_MERGE_PATCH_MESSAGE =
  'Content-Type must be application/merge-patch+json or application/json';
export const HEADERS_UNAVAILABLE_MESSAGE =
  'the custom headers of this endpoint cannot be read with the encryption key this service has; set them again to replace them';
/**
 * Why an endpoint's key cannot be read, and the fix that keeps it: the key that sealed it, back
 * in the ring. A rotation would give the endpoint a key that none of its receivers knows.
 */
export const secretUnavailableMessage = (missingKeyId?: string) =>
  missingKeyId === undefined
    ? 'the secret of this endpoint cannot be read with the encryption keys this service has: add the key that sealed it back to WEBHOOK_ENCRYPTION_KEYS (rotating it instead gives the endpoint a key its receivers do not know)'
    : `the secret of this endpoint is sealed under the key id "${missingKeyId}", which WEBHOOK_ENCRYPTION_KEYS does not hold: add that key back to WEBHOOK_ENCRYPTION_KEYS (rotating it instead gives the endpoint a key its receivers do not know)`;
/** A new key asked of PATCH, which the rotation of endpoint `id` sets. */
export const secretByPatchMessage = (id: string) =>
  `body/secret cannot be changed by PATCH: POST /webhooks/endpoints/${id}/secret/rotate sets a new signing key`;
