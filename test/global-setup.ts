import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server the tests may create databases on. */
    databaseUrl: string;
  }
}

/** The image the tests run against when no TEST_DATABASE_URL is given. */
export const POSTGRES_IMAGE = 'postgres:18-alpine';

/**
 * Finds the PostgreSQL for integration tests: TEST_DATABASE_URL when set (CI), otherwise a
 * throwaway container started with testcontainers.
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
