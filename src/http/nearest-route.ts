import type { FastifyInstance } from 'fastify';

// A path this few edits away from a route is taken for a typing slip of it.
const MAX_EDITS = 2;

/** Edits (insertions, deletions, substitutions) that turn `a` into `b`. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current[j] = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution);
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

/** Edits from `path` to `route`, a parameter segment matching any one segment. */
function distanceToRoute(segments: string[], route: string[]): number {
  if (segments.length !== route.length) return Number.POSITIVE_INFINITY;
  return route.reduce(
    (sum, part, i) => sum + (part.startsWith(':') ? 0 : editDistance(segments[i] ?? '', part)),
    0,
  );
}

/**
 * Notes the paths of the routes `app` registers from now on; the function it returns names the
 * one route path (as `/plants/{id}`) a few characters from a path that matched none, if any.
 */
export function collectRoutePaths(app: FastifyInstance): (path: string) => string | undefined {
  const routes = new Set<string>();
  app.addHook('onRoute', ({ url }) => {
    if (!url.includes('*')) routes.add(url.length > 1 ? url.replace(/\/$/, '') : url);
  });
  return (path) => {
    const segments = (path.length > 1 ? path.replace(/\/$/, '') : path).split('/');
    let nearest: string | undefined;
    let best = MAX_EDITS + 1;
    for (const route of routes) {
      const distance = distanceToRoute(segments, route.split('/'));
      if (distance < best) [nearest, best] = [route, distance];
      else if (distance === best) nearest = undefined;
    }
    return nearest?.replace(/:(\w+)/g, '{$1}');
  };
}
