import { Type } from '@sinclair/typebox';

/** An integer variable from `minimum` to `maximum`, `fallback` when it is not set. */
export const integer = (minimum: number, maximum: number, fallback: number) =>
  Type.Integer({ minimum, maximum, default: fallback });
