import type { AttemptResult } from './sending.js';

/** A Retry-After longer than this is cut to it: a receiver cannot park a delivery for days. */
export const RETRY_AFTER_MAX_MS = 24 * 3600 * 1000;

/** Each delay of the schedule is lengthened by up to this fraction, at random. */
export const JITTER = 0.2;

/** What follows an attempt. */
export type NextStep =
  | { kind: 'delivered' }
  | { kind: 'retry'; delayMs: number }
  /** The last attempt failed: the delivery is given up. */
  | { kind: 'failed' }
  /** The receiver answered 410 Gone: the delivery ends at once. */
  | { kind: 'gone' };

/** Milliseconds from `now` that a Retry-After value (seconds, or an HTTP-date) asks for. */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  let ms: number;
  if (/^\d+$/.test(text)) ms = Number(text) * 1000;
  else {
    const date = Date.parse(text);
    if (Number.isNaN(date)) return undefined;
    ms = date - now;
  }
  return Math.min(Math.max(0, ms), RETRY_AFTER_MAX_MS);
}

/**
 * After attempt `attempt` (from 1) ended with `result`: success on a 2xx; otherwise another
 * attempt after the schedule's next delay (with jitter), or after the receiver's Retry-After
 * on a 429 or 503; none after the last delay, nor after a 410.
 */
export function nextStep(
  result: AttemptResult,
  attempt: number,
  schedule: readonly number[],
  random: () => number = Math.random,
): NextStep {
  if (result.kind === 'answered') {
    if (result.status >= 200 && result.status <= 299) return { kind: 'delivered' };
    if (result.status === 410) return { kind: 'gone' };
  }
  const seconds = schedule[attempt - 1];
  if (seconds === undefined) return { kind: 'failed' };
  if (result.kind === 'answered' && (result.status === 429 || result.status === 503)) {
    const asked = retryAfterMs(result.retryAfter);
    if (asked !== undefined) return { kind: 'retry', delayMs: asked };
  }
  return { kind: 'retry', delayMs: Math.round(seconds * 1000 * (1 + JITTER * random())) };
}
