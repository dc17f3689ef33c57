import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findOnPath } from './cluster.js';
import { freePort, type RunningProcess, run } from './process.js';

export interface Backend {
  name: string;
  port: number;
}

export interface LoadBalancerOptions {
  backends: Backend[];
  /** How often each backend's /readyz is checked. */
  checkIntervalMs: number;
  /** Failed checks in a row that take a backend out; passed checks that bring it back. */
  fall: number;
  rise: number;
}

export interface LoadBalancer {
  baseUrl: string;
  process: RunningProcess;
  /** HAProxy's view of a backend: UP, DOWN, or a transition such as "UP 1/2". */
  status(backend: string): Promise<string>;
  /** Resolves once `backend` is `status`; rejects after `withinMs`. */
  waitFor(backend: string, status: 'UP' | 'DOWN', withinMs: number): Promise<void>;
  stop(): Promise<void>;
}

export function requireHaproxy(): string {
  const binary = findOnPath('haproxy');
  if (!binary) {
    throw new Error(
      'npm run test:scale needs haproxy (Debian package haproxy); install it, e.g. apt-get install pgbouncer haproxy, and run it again',
    );
  }
  return binary;
}

/**
 * Starts HAProxy (Debian package haproxy) in front of `backends` on 127.0.0.1, balancing round
 * robin and health-checking each backend with GET /readyz, as a production load balancer does.
 */
export async function startLoadBalancer(options: LoadBalancerOptions): Promise<LoadBalancer> {
  const binary = requireHaproxy();
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-haproxy-'));
  const port = await freePort();
  const statsPort = await freePort();
  const configFile = join(dir, 'haproxy.cfg');
  writeFileSync(
    configFile,
    [
      'defaults',
      '  mode http',
      '  timeout connect 2s',
      '  timeout client 30s',
      '  timeout server 30s',
      // A check waits as long as /readyz may take (2 s), not just its interval.
      '  timeout check 3s',
      // A request whose connection to a backend fails is sent to another one.
      '  retries 3',
      '  option redispatch',
      // As deploy/compose/haproxy.cfg: when no backend is ready, the service's Error shape.
      `  http-error status 503 content-type application/json string '{"error":503,"message":"no replica is ready; retry later"}' hdr retry-after 2`,
      `  default-server inter ${options.checkIntervalMs} fall ${options.fall} rise ${options.rise}`,
      'frontend plants',
      `  bind 127.0.0.1:${port}`,
      '  http-request set-header X-Forwarded-For %[src]',
      '  default_backend replicas',
      'backend replicas',
      '  balance roundrobin',
      '  option httpchk',
      '  http-check send meth GET uri /readyz',
      '  http-check expect status 200',
      ...options.backends.map(({ name, port }) => `  server ${name} 127.0.0.1:${port} check`),
      'listen stats',
      `  bind 127.0.0.1:${statsPort}`,
      '  stats enable',
      '  stats uri /stats',
      '',
    ].join('\n'),
  );
  const running = run(binary, ['-db', '-f', configFile], {});
  const statsUrl = `http://127.0.0.1:${statsPort}/stats;csv`;

  async function status(backend: string): Promise<string> {
    const csv = await (await fetch(statsUrl, { signal: AbortSignal.timeout(5000) })).text();
    const [header = '', ...rows] = csv.split('\n');
    const columns = header.replace(/^# /, '').split(',');
    const statusColumn = columns.indexOf('status');
    const row = rows
      .map((line) => line.split(','))
      .find(([proxy, server]) => proxy === 'replicas' && server === backend);
    if (!row) throw new Error(`HAProxy knows no backend ${backend}`);
    return row[statusColumn] ?? '';
  }

  async function waitFor(backend: string, wanted: 'UP' | 'DOWN', withinMs: number) {
    const deadline = Date.now() + withinMs;
    let last = '';
    while (Date.now() < deadline) {
      last = await status(backend);
      if (last === wanted) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`HAProxy did not see ${backend} ${wanted} within ${withinMs} ms (${last})`);
  }

  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await status(options.backends[0]?.name ?? '');
      break;
    } catch (error) {
      if (running.child.exitCode !== null || Date.now() > deadline) {
        running.child.kill('SIGKILL');
        rmSync(dir, { recursive: true, force: true });
        throw new Error(
          `HAProxy did not start: ${(error as Error).message}\n${running.stderr.join('\n')}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  return {
    baseUrl: `http://127.0.0.1:${port}`,
    process: running,
    status,
    waitFor,
    async stop() {
      running.child.kill('SIGTERM');
      await running.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** HAProxy in TCP mode: one address on 127.0.0.1 that leads to each of several servers in turn. */
export interface TcpRoundRobin {
  port: number;
  process: RunningProcess;
  /** `url` with its host and port replaced by the balancer's. */
  via(url: string): string;
  stop(): Promise<void>;
}

/**
 * Starts HAProxy in TCP mode in front of 127.0.0.1:`targetPorts`, each new connection to the next
 * of them (roundrobin, the first connection to the first), without health checks: one address
 * over several database servers, as a Kubernetes `-ro` Service or an HAProxy replica port is.
 */
export async function startTcpRoundRobin(targetPorts: number[]): Promise<TcpRoundRobin> {
  const binary = requireHaproxy();
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-tcp-round-robin-'));
  const port = await freePort();
  const socketPath = join(dir, 'admin.sock');
  const configFile = join(dir, 'haproxy.cfg');
  writeFileSync(
    configFile,
    [
      'global',
      `  stats socket ${socketPath}`,
      'defaults',
      '  mode tcp',
      '  timeout connect 2s',
      // Longer than the service keeps an idle connection (30 s).
      '  timeout client 5m',
      '  timeout server 5m',
      'frontend database',
      `  bind 127.0.0.1:${port}`,
      '  default_backend servers',
      'backend servers',
      '  balance roundrobin',
      ...targetPorts.map((target, index) => `  server s${index} 127.0.0.1:${target}`),
      '',
    ].join('\n'),
  );
  const running = run(binary, ['-db', '-f', configFile], {});

  // Asked on its admin socket, not by a connection: that would take the first server's turn.
  const answersOnSocket = () =>
    new Promise<boolean>((resolve) => {
      const socket = createConnection(socketPath);
      let answer = '';
      socket.on('connect', () => socket.end('show servers state servers\n'));
      socket.on('data', (chunk) => {
        answer += chunk.toString('utf8');
      });
      socket.on('error', () => resolve(false));
      socket.on('close', () => resolve(answer.includes(' s0 ')));
    });
  const deadline = Date.now() + 30_000;
  while (!(await answersOnSocket())) {
    if (running.child.exitCode !== null || Date.now() > deadline) {
      running.child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`HAProxy did not start:\n${running.stderr.join('\n')}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  return {
    port,
    process: running,
    via(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    async stop() {
      running.child.kill('SIGTERM');
      await running.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
