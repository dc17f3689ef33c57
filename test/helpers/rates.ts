/** The most of `times` (ms) that fall in any window [t, t + 1000): a rate as a receiver feels it. */
export function maxInAnySecond(times: number[]): number {
  const sorted = times.toSorted((a, b) => a - b);
  let most = 0;
  let first = 0;
  for (let last = 0; last < sorted.length; last++) {
    while ((sorted[last] as number) - (sorted[first] as number) >= 1000) first++;
    most = Math.max(most, last - first + 1);
  }
  return most;
}
