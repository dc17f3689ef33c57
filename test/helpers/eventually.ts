/**
 * Reads `read` every 25 ms until `until` holds of what it read, or `ms` have passed: what it
 * read last, for the test to assert on.
 */
export async function eventually<T>(
  read: () => Promise<T>,
  until: (value: T) => boolean,
  ms = 10_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (until(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
