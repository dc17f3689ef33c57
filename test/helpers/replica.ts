import { freePort, projectRoot, type RunningProcess, run } from './process.js';

/** One service process of a scaled-out topology, on an address it keeps across restarts. */
export interface Replica {
  name: string;
  port: number;
  baseUrl: string;
  process: RunningProcess;
}

export interface ReplicaOptions {
  name: string;
  /** Its port; a free one unless given (a restart passes the old one). */
  port?: number;
  env: Record<string, string>;
  /**
   * Resolve once /readyz answers 200 (the default), or already once the service has opened its
   * database, ready or not (it listens before: until then /readyz says it is starting).
   */
  waitFor?: 'readyz' | 'started';
}

/** Starts `node dist/server.js` and resolves once it answers; rejects if it exits first. */
export async function startReplica(options: ReplicaOptions): Promise<Replica> {
  const port = options.port ?? (await freePort());
  const running = run(
    process.execPath,
    ['dist/server.js'],
    // Warnings only: a replica under load would otherwise log a line per request.
    { HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...options.env, PORT: String(port) },
    { cwd: projectRoot },
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (running.child.exitCode !== null || running.child.signalCode !== null) break;
    try {
      const response = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) });
      const starting =
        response.status === 503 && (await response.text()).includes('the service is starting');
      if (response.status === 200 || (options.waitFor === 'started' && !starting)) {
        return { name: options.name, port, baseUrl, process: running };
      }
    } catch {}
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  running.child.kill('SIGKILL');
  await running.exited;
  throw new Error(
    `replica ${options.name} did not ${options.waitFor === 'started' ? 'start' : 'answer /readyz 200'}:\n${[...running.stderr, ...running.stdout].join('\n')}`,
  );
}
