/** A configuration problem; the message names the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';

  /** The one line a process that cannot start for it writes on stderr. */
  get line(): string {
    return `plant-store: invalid configuration: ${this.message}\n`;
  }
}
