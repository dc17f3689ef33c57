/** A configuration problem; the message names the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}
