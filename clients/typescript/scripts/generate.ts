// Generates src/generated/ from the OpenAPI document that the service serves. Run as a script
// (`npm run client:generate` at the project root, which builds the service first), it reads the
// document from the built service (served-document.ts) and writes the client; the test of the
// committed client imports `generateClient` to compare it with a fresh generation.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from '@hey-api/openapi-ts';
import { servedDocument } from './served-document.ts';

export const generatedDirectory = fileURLToPath(new URL('../src/generated', import.meta.url));

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
  // The transformers test an optional int64 for truth, which would leave a 0 a number: an
  // optional field is converted whenever it is present.
  const transformers = join(outputPath, 'transformers.gen.ts');
  const text = await readFile(transformers, 'utf8');
  await writeFile(
    transformers,
    text.replace(
      /if \(data\.(\w+)\) \{(\s+data\.\1 = BigInt\()/g,
      'if (data.$1 !== undefined) {$2',
    ),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await generateClient(await servedDocument(), generatedDirectory);
  process.stdout.write(`plant-store: client generated into ${generatedDirectory}\n`);
}
