import { chownSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { type Cluster, findOnPath, userIds } from './cluster.js';
import { freePort, type RunningProcess, run } from './process.js';

/** A PgBouncer in front of a test cluster. Plain data, so vitest can hand it to workers. */
export interface PgBouncerAddress {
  port: number;
  /** Its log, to read when a test fails. */
  logFile: string;
}

export interface RunningPgBouncer extends PgBouncerAddress {
  process: RunningProcess;
}

/** The same database as `url`, reached through PgBouncer on loopback. */
export function throughPgBouncer(url: string, pgbouncer: PgBouncerAddress): string {
  const parsed = new URL(url);
  parsed.hostname = '127.0.0.1';
  parsed.port = String(pgbouncer.port);
  return parsed.toString();
}

function requireBinary(name: string): string {
  const found = findOnPath(name);
  if (!found) {
    throw new Error(
      `npm run test:scale needs ${name} (Debian package ${name}); install it, e.g. apt-get install pgbouncer haproxy, and run it again`,
    );
  }
  return found;
}

/**
 * Starts PgBouncer in front of every database of `cluster`, as a user would run it: stock
 * settings apart from transaction pooling, its own address, and trust authentication (the
 * cluster trusts local connections too). PgBouncer refuses to run as root, so as root it runs
 * as the cluster's owner (its `-u` option).
 */
export async function startPgBouncer(cluster: Cluster): Promise<RunningPgBouncer> {
  const binary = requireBinary('pgbouncer');
  const dir = join(cluster.dir, 'pgbouncer');
  mkdirSync(dir);
  const port = await freePort();
  const logFile = join(dir, 'pgbouncer.log');
  const configFile = join(dir, 'pgbouncer.ini');
  writeFileSync(join(dir, 'userlist.txt'), '"postgres" ""\n');
  writeFileSync(
    configFile,
    [
      '[databases]',
      `* = host=127.0.0.1 port=${cluster.port}`,
      '[pgbouncer]',
      'pool_mode = transaction',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `logfile = ${logFile}`,
      '',
    ].join('\n'),
  );
  if (cluster.runAs !== undefined) {
    const { uid, gid } = userIds(cluster.runAs);
    for (const file of [dir, configFile, join(dir, 'userlist.txt')]) chownSync(file, uid, gid);
  }
  const args = cluster.runAs === undefined ? [configFile] : ['-u', cluster.runAs, configFile];
  const running = run(binary, args, {}, { cwd: dir });
  const url = throughPgBouncer(cluster.url, { port, logFile });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
    try {
      await client.connect();
      await client.query('select 1');
      return { port, logFile, process: running };
    } catch (error) {
      if (running.child.exitCode !== null || Date.now() > deadline) {
        running.child.kill('SIGKILL');
        throw new Error(
          `PgBouncer did not answer on port ${port}: ${(error as Error).message}\n${running.stderr.join('\n')}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await client.end().catch(() => {});
    }
  }
}
