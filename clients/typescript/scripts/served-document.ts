// The OpenAPI document as the built service serves it. Run as a script
// (`node clients/typescript/scripts/served-document.ts FILE`, after `npm run build`), it writes
// the document to FILE; the client's generator imports `servedDocument`.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const projectRoot = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * The document served by the built service (dist/server.js) on a throwaway embedded database.
 * It waits for the service's own "listening" line, however long the start takes; the service's
 * errors reach this process's stderr, and an early exit rejects.
 */
export async function servedDocument(): Promise<object> {
  const dataDir = mkdtempSync(join(tmpdir(), 'plant-store-document-'));
  const service = spawn(process.execPath, ['dist/server.js'], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      API_TOKENS: randomBytes(16).toString('hex'),
      HOST: '127.0.0.1',
      PORT: '0',
      DATA_DIR: dataDir,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  try {
    const address = await new Promise<string>((resolve, reject) => {
      service.once('exit', (code) =>
        reject(new Error(`the service exited (${code}) early:\n${lines.join('\n')}`)),
      );
      createInterface({ input: service.stdout }).on('line', (line) => {
        lines.push(line);
        const listening = /Server listening at (http:\/\/[^"\s]+)/.exec(line);
        if (listening?.[1]) resolve(listening[1]);
      });
    });
    const response = await fetch(`${address}/openapi.json`);
    if (!response.ok) throw new Error(`GET /openapi.json answered ${response.status}`);
    return (await response.json()) as object;
  } finally {
    if (service.exitCode === null && service.signalCode === null) {
      const exited = once(service, 'exit');
      // SIGTERM would first wait out the shutdown delay that load balancers need; SIGINT does not.
      service.kill('SIGINT');
      await exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: node served-document.ts FILE');
  writeFileSync(file, `${JSON.stringify(await servedDocument(), null, 2)}\n`);
}
