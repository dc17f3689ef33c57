/**
 * host:port/database of a server's connection string, without user or password: its `host` and
 * `port` parameters win over the URL's own, as node-postgres reads them (a socket directory
 * included).
 */
export function describeServer(url: string, pooler = false): string {
  const address = `${serverAddress(url)}${new URL(url).pathname || '/'}`;
  return `the PostgreSQL server at ${address}${pooler ? ' (through a pooler)' : ''}`;
}

/** host:port of a server's connection string, as node-postgres reads them. */
export function serverAddress(url: string): string {
  const { hostname, port, searchParams } = new URL(url);
  const host = searchParams.get('host') || decodeURIComponent(hostname) || 'localhost';
  return `${host}:${searchParams.get('port') || port || '5432'}`;
}

/** The embedded engine with its data in `dataDir` (an absolute path), or in memory. */
export function describeEmbedded(dataDir: string | undefined): string {
  return dataDir === undefined
    ? 'the embedded PostgreSQL (PGlite) in memory'
    : `the embedded PostgreSQL (PGlite) with its data in ${dataDir}`;
}
