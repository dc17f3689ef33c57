import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
} from 'node:fs';
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
import { startOtlpReceiver } from '../helpers/otlp.js';
import {
  killIfRunning,
  projectRoot,
  type RunningServer,
  run,
  startServer,
} from '../helpers/process.js';

// Rebuilds the Dockerfile's runtime stage in a temporary directory that stands for the image's
// filesystem, without Docker: the paths it COPYs (with their owner), node_modules from the same
// `npm ci` its deps stage runs, the folders its other stages make, then runs the image's
// commands in its WORKDIR with its ENV, as a non-root user whose home is elsewhere, as the image
// does. What the image would lack (a production dependency, the migrations, a file outside
// dist/, a writable data directory), this lacks too.

const stages = readDockerfileStages();
const runtime = runtimeStage(stages);
/** The image's ENV, as the runtime stage sets it (NODE_ENV=production, DATA_DIR=/data). */
const imageEnvironment = stageEnvironment(runtime);

/** distroless's `nonroot` user; another machine's user when these tests do not run as root. */
const IMAGE_USER = { uid: 65532, gid: 65532 };
const asImageUser = process.getuid?.() === 0 ? { user: IMAGE_USER } : {};

/** The folders a stage's `RUN mkdir -p ...` instructions make, if that is all it runs. */
function madeFolders(stage: DockerStage): string[] | undefined {
  const folders: string[] = [];
  for (const { text } of instructionsOf(stage, 'RUN')) {
    const words = text.trim().split(/\s+/);
    if (words[0] !== 'mkdir' || words[1] !== '-p') return undefined;
    folders.push(...words.slice(2));
  }
  return folders.length > 0 ? folders : undefined;
}

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
    const folders = madeFolders(stage);
    if (folders) {
      // A stage that only makes folders: its filesystem root, with them.
      const stageRoot = join(this.root, name);
      for (const folder of folders) mkdirSync(join(stageRoot, folder), { recursive: true });
      directory = join(stageRoot, stageWorkdir(stage));
    } else if (runs.includes('npm run build')) {
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

  /**
   * Carries out the stage's COPY instructions into `directory` (its WORKDIR), whose ancestor at
   * the WORKDIR's depth stands for the stage's filesystem root.
   */
  async copy(stage: DockerStage, directory: string): Promise<void> {
    mkdirSync(directory, { recursive: true });
    const workdir = stageWorkdir(stage);
    const filesystemRoot = join(directory, posix.relative(workdir, '/'));
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
        const base = posix.isAbsolute(destination) ? filesystemRoot : directory;
        const target =
          destination.endsWith('/') || sources.length > 1
            ? join(base, destination, basename(relativeSource))
            : join(base, destination);
        mkdirSync(dirname(target), { recursive: true });
        cpSync(sourcePath, target, { recursive: true, verbatimSymlinks: true });
        if (flags.chown && process.getuid?.() === 0) {
          const [uid = '', gid = uid] = flags.chown.split(':');
          chownSync(target, Number(uid), Number(gid));
        }
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
  /**
   * The image brings its own Node.js. This one may live where the image's user cannot reach it
   * (under root's home, mode 0700), so that user runs a copy inside the image's filesystem.
   */
  let node = process.execPath;

  /**
   * The environment of a container of the image: its ENV, with its absolute paths under `root`,
   * and the home of its user, which is not the app's directory.
   */
  const inImage = (env: Record<string, string>): Record<string, string> => ({
    ...imageEnvironment,
    ...(imageEnvironment.DATA_DIR && { DATA_DIR: join(root, imageEnvironment.DATA_DIR) }),
    HOME: '/home/nonroot',
    ...env,
  });

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'plant-store-image-'));
    // The image's user reads the app, as any user can in the image.
    chmodSync(root, 0o755);
    app = join(root, stageWorkdir(runtime));
    if (ancestorNodeModules(app).length > 0) {
      throw new Error(`packages outside the image would be found: ${ancestorNodeModules(app)}`);
    }
    await new StageRehearsal(root).copy(runtime, app);
    if (asImageUser.user) {
      node = join(root, 'usr', 'local', 'bin', 'node');
      mkdirSync(dirname(node), { recursive: true });
      cpSync(process.execPath, node);
      chmodSync(node, 0o755);
    }
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
        node,
        composeCommand('migrate'),
        inImage({ DATABASE_URL: serverUrlOf(database) }),
        { cwd: app, ...asImageUser },
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
        node,
        composeCommand('migrate'),
        inImage({ DATABASE_URL: serverUrlOf(database) }),
        { cwd: app, ...asImageUser },
      );
      const code = await migrate.exited;
      if (code !== 0) throw new Error(`migrate exited with ${code}: ${migrate.stderr.join('\n')}`);
      server = await startServer(
        inImage({
          DATABASE_URL: serverUrlOf(database),
          API_TOKENS: TOKEN,
          // As in docker-compose.yml and the Kubernetes Deployment: the migrate command did it.
          MIGRATE_ON_START: 'false',
        }),
        { cwd: app, command: node, args: composeCommand('app'), ...asImageUser },
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

  it('exports traces when an OTLP endpoint is set, with the SDK its node_modules hold', async () => {
    const database = await createScratchDatabase({ migrated: false });
    const collector = await startOtlpReceiver();
    let server: RunningServer | undefined;
    try {
      server = await startServer(
        inImage({
          DATABASE_URL: serverUrlOf(database),
          API_TOKENS: TOKEN,
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_BSP_SCHEDULE_DELAY: '50',
        }),
        { cwd: app, command: node, args: composeCommand('app'), ...asImageUser },
      );
      const response = await fetch(`${server.baseUrl}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: '{"id": 1, "name": "Monstera"}',
      });
      expect(response.status).toBe(200);
      const spans = await collector.waitFor((all) => all.length >= 2);
      expect(spans.map((span) => span.name).sort()).toStrictEqual([
        'INSERT plants',
        'POST /plants',
      ]);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      if (server) await killIfRunning(server);
      await collector.close();
      await database.drop();
    }
  });

  describe('run alone, without DATABASE_URL, as `docker run -e API_TOKENS=... plant-store`', () => {
    let server: RunningServer;

    beforeAll(async () => {
      server = await startServer(inImage({ API_TOKENS: TOKEN }), {
        cwd: app,
        command: node,
        args: imageCommand(runtime),
        ...asImageUser,
      });
    }, 120_000);

    afterAll(async () => {
      if (server) await killIfRunning(server);
    });

    it('runs the embedded engine in the data directory the image makes, and says what it is for', async () => {
      expect(imageEnvironment.DATA_DIR).toBe('/data');
      const announcement = server.stdout.find((line) => line.includes('"engine":"pglite"'));
      expect(announcement).toContain(`with its data in ${join(root, 'data')}`);
      expect(announcement).toContain('for trying things out');
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    });

    it('stores plants there, owned by the image user', async () => {
      const response = await fetch(`${server.baseUrl}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: '{"id": 9007199254740993, "name": "Monstera", "tag": "aroid"}',
      });
      expect(response.status).toBe(200);
      const owner = statSync(join(root, 'data', 'PG_VERSION')).uid;
      expect(owner).toBe(asImageUser.user?.uid ?? process.getuid?.());
    });

    it('exits 0 on SIGTERM', async () => {
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    });
  });
});
