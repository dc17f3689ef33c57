import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storedPlant, TOKEN } from '../helpers/app.js';
import { createScratchDatabase, type ScratchDatabase, serverUrlOf } from '../helpers/database.js';
import {
  composeCommand,
  type DockerStage,
  imageCommand,
  instructionsOf,
  projectFile,
  readDockerfileStages,
  runtimeStage,
  stageEnvironment,
  stageWorkdir,
} from '../helpers/deploy-files.js';
import { projectRoot, type RunningServer, run, startServer } from '../helpers/process.js';

// Rebuilds the Dockerfile's runtime stage in a temporary directory, without Docker: the paths
// it COPYs, with node_modules from the same `npm ci` its deps stage runs, then runs the image's
// commands there with its ENV. What the image would lack (a production dependency, the
// migrations, a file outside dist/), this lacks too.

const stages = readDockerfileStages();
const runtime = runtimeStage(stages);
/** The image's ENV, as the runtime stage sets it (NODE_ENV=production). */
const imageEnvironment = stageEnvironment(runtime);

/** npm's arguments of the `npm ci` among a stage's RUN instructions, if it has one. */
function npmCiArguments(stage: DockerStage): string[] | undefined {
  for (const { text } of instructionsOf(stage, 'RUN')) {
    for (const command of text.split('&&')) {
      const words = command.trim().split(/\s+/);
      if (words[0] === 'npm' && words[1] === 'ci') return words.slice(1);
    }
  }
  return undefined;
}

/** The stage's exec-form `RUN ["find", "node_modules", ...]` prunes, as argv. */
function pruneCommands(stage: DockerStage): string[][] {
  return instructionsOf(stage, 'RUN')
    .map(({ text }) => text.trim())
    .filter((text) => text.startsWith('['))
    .map((text) => JSON.parse(text) as string[])
    .filter(([command, folder]) => command === 'find' && folder === 'node_modules');
}

/** This process's environment without the npm_* variables of the `npm test` that started it. */
function npmEnvironment(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      (entry): entry is [string, string] =>
        entry[1] !== undefined && !entry[0].toLowerCase().startsWith('npm_'),
    ),
  );
}

class StageRehearsal {
  private readonly built = new Map<string, string>();

  constructor(private readonly root: string) {}

  /** The directory that stands for `name`'s WORKDIR, built on first use. */
  async stageDirectory(name: string): Promise<string> {
    const existing = this.built.get(name);
    if (existing) return existing;
    const stage = stages.find((candidate) => candidate.name === name);
    if (!stage) throw new Error(`Dockerfile: COPY --from=${name} names no stage`);
    let directory: string;
    const runs = instructionsOf(stage, 'RUN').map(({ text }) => text.trim());
    const install = npmCiArguments(stage);
    if (runs.includes('npm run build')) {
      // `npm test` runs the same build first (its pretest), into the project's dist/.
      directory = projectRoot;
    } else if (install) {
      directory = join(this.root, name);
      await this.copy(stage, directory);
      const npm = run('npm', install, npmEnvironment(), { cwd: directory });
      const code = await npm.exited;
      if (code !== 0) {
        throw new Error(`npm ${install.join(' ')} exited with ${code}: ${npm.stderr.join('\n')}`);
      }
      for (const [command = 'find', ...args] of pruneCommands(stage)) {
        const prune = run(command, args, npmEnvironment(), { cwd: directory });
        if ((await prune.exited) !== 0) throw new Error(`find failed: ${prune.stderr.join('\n')}`);
      }
    } else {
      throw new Error(`the rehearsal does not know how to build the Dockerfile stage ${name}`);
    }
    this.built.set(name, directory);
    return directory;
  }

  /** Carries out the stage's COPY instructions into `directory` (its WORKDIR). */
  async copy(stage: DockerStage, directory: string): Promise<void> {
    mkdirSync(directory, { recursive: true });
    const workdir = stageWorkdir(stage);
    for (const { flags, args } of instructionsOf(stage, 'COPY')) {
      const destination = args.at(-1) ?? '';
      const sources = args.slice(0, -1);
      let from = projectRoot;
      let fromWorkdir = '/';
      if (flags.from) {
        from = await this.stageDirectory(flags.from);
        const fromStage = stages.find((candidate) => candidate.name === flags.from);
        fromWorkdir = fromStage ? stageWorkdir(fromStage) : '/';
      }
      for (const source of sources) {
        const relativeSource = posix.isAbsolute(source)
          ? posix.relative(fromWorkdir, source)
          : source;
        if (relativeSource.startsWith('..')) {
          throw new Error(`COPY ${source}: outside the stage's WORKDIR ${fromWorkdir}`);
        }
        const sourcePath = join(from, relativeSource);
        if (!existsSync(sourcePath)) throw new Error(`COPY ${source}: ${sourcePath} is missing`);
        const relativeDestination = posix.isAbsolute(destination)
          ? posix.relative(workdir, destination)
          : destination;
        const target =
          destination.endsWith('/') || sources.length > 1
            ? join(directory, relativeDestination, basename(relativeSource))
            : join(directory, relativeDestination);
        mkdirSync(dirname(target), { recursive: true });
        cpSync(sourcePath, target, { recursive: true, verbatimSymlinks: true });
      }
    }
  }
}

/** Node resolves packages from every parent directory's node_modules, not only the app's. */
function ancestorNodeModules(directory: string): string[] {
  const found: string[] = [];
  for (let parent = dirname(directory); ; parent = dirname(parent)) {
    if (existsSync(join(parent, 'node_modules'))) found.push(join(parent, 'node_modules'));
    if (dirname(parent) === parent) return found;
  }
}

describe('the production image, rehearsed without Docker', () => {
  let root: string;
  let app: string;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'plant-store-image-'));
    app = join(root, 'app');
    if (ancestorNodeModules(app).length > 0) {
      throw new Error(`packages outside the image would be found: ${ancestorNodeModules(app)}`);
    }
    await new StageRehearsal(root).copy(runtime, app);
  }, 300_000);

  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it('installs every production dependency', () => {
    const { dependencies } = JSON.parse(projectFile('package.json')) as {
      dependencies: Record<string, string>;
    };
    const missing = Object.keys(dependencies).filter(
      (name) => !existsSync(join(app, 'node_modules', name, 'package.json')),
    );
    expect(Object.keys(dependencies).length).toBeGreaterThan(0);
    expect(missing).toStrictEqual([]);
  });

  it('installs none of the development tools', () => {
    const present = ['vitest', 'typescript', 'drizzle-kit', '@biomejs/biome'].filter((name) =>
      existsSync(join(app, 'node_modules', name)),
    );
    expect(present).toStrictEqual([]);
  });

  it('leaves out the type declarations and source maps of the dependencies', () => {
    const fastify = join(app, 'node_modules', 'fastify');
    expect(existsSync(join(fastify, 'fastify.js'))).toBe(true);
    expect(existsSync(join(fastify, 'fastify.d.ts'))).toBe(false);
    expect(existsSync(join(app, 'node_modules', 'drizzle-orm', 'index.js.map'))).toBe(false);
  });

  it("starts the service by default, as compose's app service does", () => {
    expect(composeCommand('app')).toStrictEqual(imageCommand(runtime));
  });

  it('applies the migrations to an empty database with the compose migrate command', async () => {
    const database = await createScratchDatabase({ migrated: false });
    try {
      const migrate = run(
        process.execPath,
        composeCommand('migrate'),
        { ...imageEnvironment, DATABASE_URL: serverUrlOf(database) },
        { cwd: app },
      );
      expect(await migrate.exited, migrate.stderr.join('\n')).toBe(0);
      const [table] = await database.query<{ name: string | null }>(
        "select to_regclass('public.plants')::text as name",
      );
      expect(table?.name).toBe('plants');
    } finally {
      await database.drop();
    }
  });

  describe('started with the compose app command on a database the migrate command prepared', () => {
    let database: ScratchDatabase;
    let server: RunningServer;

    beforeAll(async () => {
      database = await createScratchDatabase({ migrated: false });
      const migrate = run(
        process.execPath,
        composeCommand('migrate'),
        { ...imageEnvironment, DATABASE_URL: serverUrlOf(database) },
        { cwd: app },
      );
      const code = await migrate.exited;
      if (code !== 0) throw new Error(`migrate exited with ${code}: ${migrate.stderr.join('\n')}`);
      server = await startServer(
        {
          ...imageEnvironment,
          DATABASE_URL: serverUrlOf(database),
          API_TOKENS: TOKEN,
          // As in docker-compose.yml and the Kubernetes Deployment: the migrate command did it.
          MIGRATE_ON_START: 'false',
        },
        { cwd: app, args: composeCommand('app') },
      );
    });

    afterAll(async () => {
      if (server && server.child.exitCode === null && server.child.signalCode === null) {
        server.child.kill('SIGKILL');
        await server.exited;
      }
      await database?.drop();
    });

    it('answers GET /readyz with 200', async () => {
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    });

    it('stores a plant posted with a valid token', async () => {
      const response = await fetch(`${server.baseUrl}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: '{"id": 9007199254740993, "name": "Monstera", "tag": "aroid"}',
      });
      expect(response.status).toBe(200);
      expect(await response.json()).toStrictEqual({ name: 'Monstera', tag: 'aroid' });
      expect(await storedPlant(database, '9007199254740993')).toStrictEqual({
        id: '9007199254740993',
        name: 'Monstera',
        tag: 'aroid',
      });
    });

    it('exits 0 on SIGTERM', async () => {
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    });
  });
});
