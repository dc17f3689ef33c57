// The http-ceiling target: the service as createService (dist/service.js) builds it, with its
// logging, metrics, auth, body parsing, validation and serialisation, but a repository that does
// no I/O and answers as if every plant were created and every read found. Whatever the real
// service loses against it is spent on the database path.
//
// Configured by the same environment variables as dist/server.js; the database is opened (and
// answers /readyz) but no request reaches it.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as ConfigModule from '../src/config.js';
import type { PlantRepository } from '../src/plants/repository.js';
import type * as SerializeModule from '../src/plants/serialize.js';
import type * as ServiceModule from '../src/service.js';
import { distFolder } from './paths.js';

// Imported from dist/ at run time, so this process runs the very code the service runs; the
// `typeof import` types keep this file checked against the sources.
const fromDist = (file: string) => import(pathToFileURL(join(distFolder, file)).href);
const { ConfigError, loadConfig } = (await fromDist('config.js')) as typeof ConfigModule;
const { createService } = (await fromDist('service.js')) as typeof ServiceModule;
const { storedPlantJson } = (await fromDist('plants/serialize.js')) as typeof SerializeModule;

let config: ConfigModule.Config;
try {
  config = loadConfig(process.env);
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`http-ceiling: invalid configuration: ${error.message}\n`);
  process.exit(1);
}

const idle = { queued: 0, inFlight: 0 };
const repository: PlantRepository = {
  createPlant: async (plant) => ({
    outcome: 'created',
    plant: plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag },
  }),
  getPlant: async (id) => ({ id, name: 'Monstera deliciosa', tag: 'aroid' }),
  listPlants: async ({ limit, after = 0n }) => ({
    json: `[${Array.from({ length: limit }, (_, i) =>
      storedPlantJson({ id: after + 1n + BigInt(i), name: 'Monstera deliciosa', tag: 'aroid' }),
    ).join(',')}]`,
    count: limit,
    lastId: after + BigInt(limit),
  }),
  deletePlant: async () => true,
  drain: async () => {},
  stats: () => ({ writes: idle, reads: idle }),
};

const service = await createService(config, { repository: () => repository });

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) process.exit(1);
  stopping = true;
  await service.close();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

await service.listen();
await service.open();
