// Compiles src/ into dist/ when, and only when, what the build reads has changed: `npm start`,
// `npm test` and the other scripts run this first, so a start pays for a build once.
//
// The service's modules and the packages they import are bundled (esbuild) into a few files:
// Node.js resolves every file of a package against its package.json, and drizzle-orm's is so
// large that loading it file by file costs more than half a second of each start. Every module
// of src/ stays an entry point, so dist/app.js, dist/db/postgres.js and the others can still be
// imported one by one. Types are checked by `npm run check`, not here.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Every script runs this first, so an unsupported Node.js is named here, before anything fails
// in a way that does not say why (npm does not enforce package.json's engines field).
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 15)) {
  process.stderr.write(
    `plant-store needs Node.js 22.15 or later (24 recommended); this is Node.js ${process.version}.\n`,
  );
  process.exit(1);
}

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const dist = join(root, 'dist');
const manifestFile = join(dist, '.build-inputs.json');

// These read files that sit beside their own modules at run time (the reference page's assets,
// the engine's WebAssembly), so they are loaded from node_modules as installed; pg-native is an
// optional add-on of pg that the service does not use; and the OpenTelemetry SDK, loaded only
// when tracing is on (src/tracing/start.ts), is left whole in node_modules, its exporters and
// their optional transports (gRPC) unbundled. Its API is bundled (prom-client loads it in any
// case): copies of one API version share their state through a global, as designed.
const external = [
  '@electric-sql/pglite',
  '@fastify/swagger-ui',
  'pg-native',
  '@opentelemetry/sdk-node',
  '@opentelemetry/resources',
];

/** Every file the output depends on, by path from the project root, with its SHA-256. */
function readInputs() {
  const files = [
    ...readdirSync(join(root, 'src'), { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath, entry.name).slice(root.length + 1)),
    'package.json',
    'package-lock.json',
    'tsconfig.json',
    'scripts/build.js',
  ].sort();
  return Object.fromEntries(
    files.map((file) => [
      file,
      createHash('sha256')
        .update(readFileSync(join(root, file)))
        .digest('hex'),
    ]),
  );
}

function readManifest() {
  try {
    return JSON.parse(readFileSync(manifestFile, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Why dist/ must be built again, or undefined when it is up to date. */
function staleness(inputs, manifest) {
  if (!manifest || !existsSync(join(dist, 'server.js'))) return 'no build yet';
  const changed = Object.keys({ ...inputs, ...manifest.inputs }).filter(
    (file) => inputs[file] !== manifest.inputs[file],
  );
  if (changed.length === 0) return undefined;
  const named = changed.slice(0, 3).join(', ');
  return changed.length > 3
    ? `${named} and ${changed.length - 3} more changed`
    : `${named} changed`;
}

async function build(inputs) {
  const { build: bundle } = await import('esbuild');
  const staging = `${dist}.building-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  try {
    await bundle({
      absWorkingDir: root,
      entryPoints: Object.keys(inputs).filter((file) => /^src\/.*(?<!\.d)\.ts$/.test(file)),
      outdir: staging,
      outbase: 'src',
      chunkNames: 'chunks/[name]-[hash]',
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node22',
      external,
      // Bundled CommonJS packages call require(); an ES module has none of its own.
      banner: {
        js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
      },
      sourcemap: 'linked',
      sourcesContent: false,
      logLevel: 'error',
    });
    writeFileSync(
      join(staging, '.build-inputs.json'),
      `${JSON.stringify({ builtAt: new Date().toISOString(), inputs }, null, 2)}\n`,
    );
    rmSync(dist, { recursive: true, force: true });
    renameSync(staging, dist);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    throw error;
  }
}

const say = (line) => process.stdout.write(`plant-store: ${line}\n`);
const inputs = readInputs();
const manifest = readManifest();
const reason = staleness(inputs, manifest);
if (reason === undefined) {
  say(`dist/ is up to date with src/ (built ${manifest.builtAt})`);
} else {
  say(`compiling src/ into dist/ (${reason})`);
  const started = performance.now();
  try {
    await build(inputs);
  } catch {
    // esbuild has printed the errors, with their files and lines.
    process.exit(1);
  }
  say(`compiled in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
