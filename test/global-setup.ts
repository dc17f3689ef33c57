import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The engine the integration tests of this project run on. */
    engine: 'postgres' | 'pglite';
    /** A PostgreSQL server the tests may create databases on (the postgres project only). */
    databaseUrl: string;
  }
}

/** The image the tests run against when no TEST_DATABASE_URL is given. */
export const POSTGRES_IMAGE = 'postgres:18-alpine';

/**
 * Finds the PostgreSQL server for the postgres project: TEST_DATABASE_URL when set (CI),
 * otherwise a throwaway container started with testcontainers. vitest.config.ts includes this
 * project only when one of the two is available.
 */
export default async function setup(project: TestProject) {
  const fromEnvironment = process.env.TEST_DATABASE_URL;
  if (fromEnvironment) {
    project.provide('databaseUrl', fromEnvironment);
    return;
  }
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer(POSTGRES_IMAGE).start();
  project.provide('databaseUrl', container.getConnectionUri());
  return async () => {
    await container.stop();
  };
}
