import { readMigrationFiles } from 'drizzle-orm/migrator';
import { describe, expect, inject, it } from 'vitest';
import { migrationsFolder } from '../../src/db/migrate.js';
import { TOKEN } from '../helpers/app.js';
import { createClusterDatabase, ensureClusterRunning, queryUrl } from '../helpers/cluster.js';
import { throughPgBouncer } from '../helpers/pgbouncer.js';
import { run } from '../helpers/process.js';
import { startReplica } from '../helpers/replica.js';

const cluster = inject('cluster');
const pgbouncer = inject('pgbouncer');

async function freshDatabase(): Promise<{ direct: string; pooled: string }> {
  await ensureClusterRunning(cluster);
  const direct = await createClusterDatabase(cluster);
  return { direct, pooled: throughPgBouncer(direct, pgbouncer) };
}

/** `npm run db:migrate` as a deploy job runs it: dist/migrate.js, here through PgBouncer. */
function migrate(pooledUrl: string) {
  return run(process.execPath, ['dist/migrate.js'], {
    DATABASE_URL: pooledUrl,
    DB_POOLER: 'true',
  });
}

describe('migrations through PgBouncer in transaction mode', () => {
  it('three migrate processes started together apply the schema once', async () => {
    const { direct, pooled } = await freshDatabase();
    const migrators = [migrate(pooled), migrate(pooled), migrate(pooled)];
    const codes = await Promise.all(migrators.map(({ exited }) => exited));
    const history = await queryUrl<{ created_at: string }>(
      direct,
      'select created_at::text from drizzle.__drizzle_migrations order by id',
    );
    const tables = await queryUrl(direct, "select to_regclass('plants')::text as plants");
    console.log(
      `[scale] three migrate processes through PgBouncer: exit codes ${JSON.stringify(codes)}, migrations recorded ${history.length}`,
    );
    expect(codes, migrators.flatMap(({ stdout }) => stdout).join('\n')).toStrictEqual([0, 0, 0]);
    // Each migration this build ships, recorded once, in order.
    const shipped = readMigrationFiles({ migrationsFolder });
    expect(history).toStrictEqual(shipped.map((m) => ({ created_at: String(m.folderMillis) })));
    expect(tables).toStrictEqual([{ plants: 'plants' }]);
  });

  it('a replica reports not ready until the migration job has run, then ready', async () => {
    const { pooled } = await freshDatabase();
    const replica = await startReplica({
      name: 'unmigrated',
      env: {
        DATABASE_URL: pooled,
        DB_POOLER: 'true',
        API_TOKENS: TOKEN,
        MIGRATE_ON_START: 'false',
        SHUTDOWN_DELAY_MS: '0',
      },
      waitFor: 'started',
    });
    try {
      const before = await fetch(`${replica.baseUrl}/readyz`);
      expect(before.status).toBe(503);
      expect(await before.json()).toStrictEqual({
        error: 503,
        message: 'the database schema is not migrated',
      });
      expect(await migrate(pooled).exited).toBe(0);
      expect((await fetch(`${replica.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      replica.process.child.kill('SIGTERM');
      await replica.process.exited;
    }
  });
});
