/**
 * Why a delivery exists: its event's fan-out (`delivery`), a `recover` or the operator's
 * redeliver (`recover`), a resend of one event (`resend`), or a test of the endpoint (`test`).
 */
export const DELIVERY_TRIGGERS = ['delivery', 'recover', 'resend', 'test'] as const;
export type DeliveryTrigger = (typeof DELIVERY_TRIGGERS)[number];

/**
 * Why an attempt was made, as the attempt log says: its delivery's trigger for the first
 * attempt, `retry` for every later one.
 */
export const ATTEMPT_TRIGGERS = ['delivery', 'retry', 'recover', 'resend', 'test'] as const;
export type AttemptTrigger = (typeof ATTEMPT_TRIGGERS)[number];

/** The trigger of attempt `attempt` (from 1) of a delivery made for `trigger`. */
export const attemptTrigger = (trigger: DeliveryTrigger, attempt: number): AttemptTrigger =>
  attempt > 1 ? 'retry' : trigger;
