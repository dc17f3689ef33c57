import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/config.js';
import {
  composeCommand,
  imageCommand,
  instructionsOf,
  projectFile,
  readCompose,
  runtimeStage,
  stageEnvironment,
} from '../helpers/deploy-files.js';
import { projectRoot } from '../helpers/process.js';

const folder = 'deploy/kubernetes';

interface HttpProbe {
  httpGet?: { path?: string; port?: string | number; scheme?: string };
  periodSeconds?: number;
  failureThreshold?: number;
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string } };
}

interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: EnvVar[];
  envFrom?: unknown[];
  startupProbe?: HttpProbe;
  livenessProbe?: HttpProbe;
  readinessProbe?: HttpProbe;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: Record<string, unknown>;
}

interface PodTemplate {
  metadata?: { labels?: Record<string, string> };
  spec: {
    containers: Container[];
    securityContext?: Record<string, unknown>;
    terminationGracePeriodSeconds?: number;
  };
}

interface Manifest {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string };
  spec?: {
    template?: PodTemplate;
    selector?: Record<string, string>;
    ports?: { port: number; targetPort: number | string }[];
  };
  stringData?: Record<string, string>;
  data?: Record<string, string>;
  resources?: string[];
}

const files = readdirSync(join(projectRoot, folder))
  .filter((file) => /\.ya?ml$/.test(file))
  .sort();

/** Every file of the folder, as its YAML documents (with their parse errors). */
const documents = new Map(
  files.map((file) => [file, parseAllDocuments(projectFile(`${folder}/${file}`))] as const),
);

function contents(file: string): Manifest {
  const parsed = documents.get(file);
  if (!parsed || !Array.isArray(parsed) || parsed.length !== 1) {
    throw new Error(`${file} is not one YAML document`);
  }
  return parsed[0]?.toJS() as Manifest;
}

/** The one manifest of `kind` in the folder. */
function manifest(kind: string): Manifest {
  const matches = files.map(contents).filter((m) => m.kind === kind);
  if (matches.length !== 1) throw new Error(`expected one ${kind}, found ${matches.length}`);
  return matches[0] as Manifest;
}

function podTemplate(kind: 'Deployment' | 'Job'): PodTemplate {
  const template = manifest(kind).spec?.template;
  if (!template) throw new Error(`${kind} has no pod template`);
  return template;
}

function container(kind: 'Deployment' | 'Job'): Container {
  const [first, ...others] = podTemplate(kind).spec.containers;
  if (!first || others.length > 0) throw new Error(`${kind} must have exactly one container`);
  return first;
}

function envValue(of: Container, name: string): string | undefined {
  return of.env?.find((variable) => variable.name === name)?.value;
}

/** The service's configuration as the Deployment sets it (defaults for what it leaves out). */
function deploymentConfig() {
  const env: Record<string, string> = { API_TOKENS: 'placeholder' };
  for (const { name, value } of container('Deployment').env ?? []) {
    if (value !== undefined) env[name] = value;
  }
  return loadConfig(env);
}

/** The container port a probe (or a Service's targetPort) refers to, by number or by name. */
function resolvePort(of: Container, port: string | number | undefined): number | undefined {
  if (typeof port === 'number') return port;
  return of.ports?.find((candidate) => candidate.name === port)?.containerPort;
}

/** The secret keys a container reads, as `secret/key`. */
function secretKeysRead(of: Container): string[] {
  return (of.env ?? []).flatMap(({ valueFrom }) =>
    valueFrom?.secretKeyRef ? [`${valueFrom.secretKeyRef.name}/${valueFrom.secretKeyRef.key}`] : [],
  );
}

const exposedPorts = instructionsOf(runtimeStage(), 'EXPOSE').flatMap(({ args }) =>
  args.map((port) => Number.parseInt(port, 10)),
);

describe(`the manifests in ${folder}`, () => {
  it('are YAML files that each hold one resource and parse without errors', () => {
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      const parsed = documents.get(file) ?? [];
      expect(parsed, file).toHaveLength(1);
      expect(parsed[0]?.errors, file).toStrictEqual([]);
      const resource = contents(file);
      expect(resource.apiVersion, file).toEqual(expect.any(String));
      expect(resource.kind, file).toEqual(expect.any(String));
    }
  });

  it('are all listed in kustomization.yaml, apart from the Secret template', () => {
    const listed = contents('kustomization.yaml').resources ?? [];
    const manifests = files.filter(
      (file) => file !== 'kustomization.yaml' && !file.endsWith('.example.yaml'),
    );
    expect([...listed].sort()).toStrictEqual(manifests);
  });

  it('keep the Secret template out of kustomization.yaml, so applying never overwrites the real Secret', () => {
    expect(files).toContain('secret.example.yaml');
    expect(contents('kustomization.yaml').resources).not.toContain('secret.example.yaml');
  });
});

describe('the Deployment', () => {
  it('checks liveness with GET /healthz on the port the container listens on', () => {
    const app = container('Deployment');
    expect(app.livenessProbe?.httpGet?.path).toBe('/healthz');
    expect(app.livenessProbe?.httpGet?.scheme ?? 'HTTP').toBe('HTTP');
    expect(resolvePort(app, app.livenessProbe?.httpGet?.port)).toBe(3000);
  });

  it('checks readiness with GET /readyz on the port the container listens on', () => {
    const app = container('Deployment');
    expect(app.readinessProbe?.httpGet?.path).toBe('/readyz');
    expect(app.readinessProbe?.httpGet?.scheme ?? 'HTTP').toBe('HTTP');
    expect(resolvePort(app, app.readinessProbe?.httpGet?.port)).toBe(3000);
  });

  it('waits for start-up on /healthz, so a database outage never restarts a pod', () => {
    const app = container('Deployment');
    expect(app.startupProbe?.httpGet?.path).toBe('/healthz');
    expect(resolvePort(app, app.startupProbe?.httpGet?.port)).toBe(3000);
  });

  it('listens on the port the image exposes and sets PORT to it', () => {
    const app = container('Deployment');
    expect(app.ports?.map((port) => port.containerPort)).toStrictEqual(exposedPorts);
    expect(envValue(app, 'PORT')).toBe(String(exposedPorts[0]));
  });

  it("runs the image's default command, the one the compose app service runs", () => {
    const app = container('Deployment');
    expect(app.command).toBeUndefined();
    expect(app.args).toStrictEqual(imageCommand());
    expect(app.args).toStrictEqual(composeCommand('app'));
  });

  it('leaves the migrations to the Job', () => {
    expect(envValue(container('Deployment'), 'MIGRATE_ON_START')).toBe('false');
  });

  it('lets the service report not ready, then finish in-flight requests, before the kubelet kills the pod', () => {
    const grace = podTemplate('Deployment').spec.terminationGracePeriodSeconds;
    const { delayMs: shutdownDelayMs, timeoutMs: shutdownTimeoutMs } = deploymentConfig().shutdown;
    expect(grace).toBeDefined();
    expect((grace ?? 0) * 1000).toBeGreaterThan(shutdownDelayMs + shutdownTimeoutMs);
  });

  it('lets a readiness probe see a stopping pod within the shutdown delay', () => {
    const { readinessProbe } = container('Deployment');
    // Kubernetes' defaults: every 10 s, 3 failures.
    const noticeMs =
      (readinessProbe?.periodSeconds ?? 10) * (readinessProbe?.failureThreshold ?? 3) * 1000;
    expect(deploymentConfig().shutdown.delayMs).toBeGreaterThan(0);
    expect(noticeMs).toBeLessThanOrEqual(deploymentConfig().shutdown.delayMs);
  });

  it('runs two replicas', () => {
    expect((manifest('Deployment').spec as { replicas?: number }).replicas).toBe(2);
  });

  it("keeps the image's NODE_OPTIONS, the memory flags of npm start that docs/operations.md names", () => {
    const { NODE_OPTIONS } = stageEnvironment(runtimeStage());
    const start = JSON.parse(projectFile('package.json')).scripts.start as string;
    expect(start).toContain(`NODE_OPTIONS="${NODE_OPTIONS} \${NODE_OPTIONS:-}"`);
    expect(NODE_OPTIONS).toMatch(/--max-old-space-size=\d+/);
    expect(projectFile('docs/operations.md')).toContain(`\`${NODE_OPTIONS}\``);
    // Setting it here, or in the compose app service, would replace the image's, not add to it.
    expect(container('Deployment').env?.map(({ name }) => name)).not.toContain('NODE_OPTIONS');
    const compose = readCompose().services.app?.environment ?? {};
    const composeNames = Array.isArray(compose)
      ? compose.map((entry) => entry.split('=')[0])
      : Object.keys(compose);
    expect(composeNames).not.toContain('NODE_OPTIONS');
  });

  it('requests and limits CPU and memory', () => {
    const { resources } = container('Deployment');
    for (const kind of ['requests', 'limits'] as const) {
      expect(Object.keys(resources?.[kind] ?? {}).sort()).toStrictEqual(['cpu', 'memory']);
    }
  });
});

describe.each(['Deployment', 'Job'] as const)('the %s', (kind) => {
  it('runs as the distroless nonroot user, read-only and without privileges', () => {
    const nonroot = { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532 };
    const seccompProfile = { type: 'RuntimeDefault' };
    expect(podTemplate(kind).spec.securityContext).toMatchObject({ ...nonroot, seccompProfile });
    expect(container(kind).securityContext).toMatchObject({
      ...nonroot,
      seccompProfile,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
  });
});

describe('the migrate Job', () => {
  it('runs the command of the compose migrate service', () => {
    const migrate = container('Job');
    expect(migrate.command).toBeUndefined();
    expect(migrate.args).toStrictEqual(composeCommand('migrate'));
  });

  it("runs the Deployment's image, which holds the migrations", () => {
    expect(container('Job').image).toBe(container('Deployment').image);
  });
});

describe('the Service', () => {
  it("selects the Deployment's pods", () => {
    const selector = manifest('Service').spec?.selector ?? {};
    expect(Object.keys(selector).length).toBeGreaterThan(0);
    expect(podTemplate('Deployment').metadata?.labels).toMatchObject(selector);
  });

  it('forwards port 80 to the port the container listens on', () => {
    const ports = manifest('Service').spec?.ports ?? [];
    expect(ports.map((port) => port.port)).toStrictEqual([80]);
    expect(resolvePort(container('Deployment'), ports[0]?.targetPort)).toBe(3000);
  });
});

describe('the Secret template', () => {
  const secret = () => contents('secret.example.yaml');
  const name = () => secret().metadata?.name;

  it('has exactly the keys the Deployment and the Job read', () => {
    const keys = Object.keys({ ...secret().data, ...secret().stringData }).map(
      (key) => `${name()}/${key}`,
    );
    const read = new Set([
      ...secretKeysRead(container('Deployment')),
      ...secretKeysRead(container('Job')),
    ]);
    expect(keys.sort()).toStrictEqual([...read].sort());
  });

  it("holds placeholder values the service's configuration accepts", () => {
    expect(() => loadConfig(secret().stringData ?? {})).not.toThrow();
  });
});
