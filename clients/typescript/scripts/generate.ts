// Generates src/generated/ from the OpenAPI document that the service serves. Run as a script
// (`npm run client:generate` at the project root, which builds the service first), it starts the
// built service on the embedded engine, fetches GET /openapi.json and writes the client; the test
// of the committed client imports `generateClient` to compare it with a fresh generation.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createClient } from '@hey-api/openapi-ts';

export const generatedDirectory = fileURLToPath(new URL('../src/generated', import.meta.url));
const projectRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Writes the client of `document` (an OpenAPI object) into `outputPath`, replacing what was there. */
export async function generateClient(document: object, outputPath: string): Promise<void> {
  await createClient({
    // The generator annotates the document it is given; the caller's copy stays as it was.
    input: structuredClone(document) as Record<string, unknown>,
    output: { path: outputPath, clean: true },
    logs: { level: 'silent', file: false },
    plugins: [
      '@hey-api/client-fetch',
      '@hey-api/typescript',
      { name: '@hey-api/sdk', transformer: true },
      // int64 fields are typed `bigint`, and responses turn them into bigints.
      { name: '@hey-api/transformers', bigInt: true, dates: false },
    ],
  });
}

/** The document served by the built service (dist/server.js) on a throwaway embedded database. */
async function fetchServedDocument(): Promise<object> {
  const dataDir = mkdtempSync(join(tmpdir(), 'plant-store-client-'));
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
  try {
    const address = await new Promise<string>((resolve, reject) => {
      service.once('exit', (code) => reject(new Error(`the service exited (${code}) early`)));
      createInterface({ input: service.stdout }).on('line', (line) => {
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
  await generateClient(await fetchServedDocument(), generatedDirectory);
  process.stdout.write(`plant-store: client generated into ${generatedDirectory}\n`);
}
