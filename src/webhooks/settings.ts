import { type Static, Type } from '@sinclair/typebox';
import {
  DeliveryEnvironment,
  type DeliverySettings,
  readDeliverySettings,
} from './delivery/settings.js';
import {
  readSecuritySettings,
  SecurityEnvironment,
  type SecuritySettings,
} from './security/settings.js';

/** Every WEBHOOK_* variable: each room reads its own. */
export const WebhookEnvironment = Type.Composite([DeliveryEnvironment, SecurityEnvironment]);

export type WebhookSettings = DeliverySettings & SecuritySettings;

export function readWebhookSettings(
  environment: Static<typeof WebhookEnvironment>,
): WebhookSettings {
  return { ...readDeliverySettings(environment), ...readSecuritySettings(environment) };
}
