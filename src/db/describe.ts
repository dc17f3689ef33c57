/** host:port/database of a server's connection string, without user or password. */
export function describeServer(url: string, pooler = false): string {
  const { hostname, port, pathname } = new URL(url);
  const address = `${hostname || 'localhost'}:${port || '5432'}${pathname || '/'}`;
  return `the PostgreSQL server at ${address}${pooler ? ' (through a pooler)' : ''}`;
}

/** The embedded engine with its data in `dataDir` (an absolute path), or in memory. */
export function describeEmbedded(dataDir: string | undefined): string {
  return dataDir === undefined
    ? 'the embedded PostgreSQL (PGlite) in memory'
    : `the embedded PostgreSQL (PGlite) with its data in ${dataDir}`;
}
