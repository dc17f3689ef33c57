/**
 * host:port/database of a server's connection string, without user or password: its `host` and
 * `port` parameters win over the URL's own, as node-postgres reads them (a socket directory
 * included).
 */
export function describeServer(url: string, pooler = false): string {
  const { hostname, port, pathname, searchParams } = new URL(url);
  const host = searchParams.get('host') || decodeURIComponent(hostname) || 'localhost';
  const address = `${host}:${searchParams.get('port') || port || '5432'}${pathname || '/'}`;
  return `the PostgreSQL server at ${address}${pooler ? ' (through a pooler)' : ''}`;
}

/** The embedded engine with its data in `dataDir` (an absolute path), or in memory. */
export function describeEmbedded(dataDir: string | undefined): string {
  return dataDir === undefined
    ? 'the embedded PostgreSQL (PGlite) in memory'
    : `the embedded PostgreSQL (PGlite) with its data in ${dataDir}`;
}
