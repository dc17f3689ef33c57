import type { FastifyInstance, FastifyRequest } from 'fastify';
import { HttpError } from './errors.js';

/** The handlers that answer 405, to tell their routes from the ones that serve. */
const refusals = new WeakSet<object>();

/**
 * Answers 405 with Allow to the methods `url` does not serve (RFC 9110 §15.5.6), in `app`'s
 * scope: after its onRequest hooks (authentication), before the body is read. Fastify requires
 * a handler, which the request never reaches.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: string[]): void {
  const allow = allowed.join(', ');
  const refuse = async (request: FastifyRequest) => {
    throw new HttpError(405, `${request.method} is not allowed here; allowed: ${allow}`, {
      allow,
    });
  };
  refusals.add(refuse);
  const others = app.supportedMethods.filter((method) => !allowed.includes(method));
  if (others.length === 0) return;
  app.route({
    method: others,
    url,
    schema: { hide: true },
    onRequest: refuse,
    handler: refuse,
  });
}

/** Allow lists the methods in one order, whatever order their routes were registered in. */
const ORDER = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
const rank = (method: string) => (ORDER.includes(method) ? ORDER.indexOf(method) : ORDER.length);

/**
 * Notes the methods of every route registered from now on in `app`'s scope; the function it
 * returns, called once they all are, answers 405 with Allow on each of their paths to the other
 * methods, after the scope's own hooks (paths that refuse them already, as a scope does after its
 * authentication, are left as they are).
 */
export function collectServedMethods(app: FastifyInstance): () => void {
  // By path without its trailing slash: a prefixed '/' route serves both forms (Fastify's
  // prefixTrailingSlash), though its methods may be announced under either.
  const served = new Map<string, { urls: Set<string>; methods: Set<string> }>();
  app.addHook('onRoute', (route) => {
    const path = route.url.length > 1 ? route.url.replace(/\/$/, '') : route.url;
    const entry = served.get(path) ?? { urls: new Set(), methods: new Set() };
    entry.urls.add(route.url);
    const refusal = refusals.has(route.handler);
    for (const method of [route.method].flat()) entry.methods.add(refusal ? '!' : method);
    served.set(path, entry);
  });
  return () => {
    for (const { urls, methods } of served.values()) {
      if (methods.has('!')) continue;
      const allowed = [...methods].sort((a, b) => rank(a) - rank(b));
      for (const url of urls) refuseOtherMethods(app, url, allowed);
    }
  };
}
