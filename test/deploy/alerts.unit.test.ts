import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createMetrics } from '../../src/http/metrics.js';
import { createWebhookMetrics } from '../../src/webhooks/delivery/metrics.js';
import { projectFile } from '../helpers/deploy-files.js';
import { projectRoot } from '../helpers/process.js';
import { promtoolPath } from '../helpers/promtool.js';

// deploy/prometheus/alerts.yml: rules on metrics the service serves, each with a runbook in
// docs/operations.md, each tested firing and silent by promtool (alerts.test.yml).

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

interface RuleTest {
  alert_rule_test: { alertname: string; exp_alerts: unknown[] }[];
}

const rulesFile = 'deploy/prometheus/alerts.yml';
const testsFile = 'deploy/prometheus/alerts.test.yml';
const [group, ...otherGroups] = (
  parse(projectFile(rulesFile)) as { groups: { rules: AlertRule[] }[] }
).groups;
const rules = group?.rules ?? [];
const ruleTests = (parse(projectFile(testsFile)) as { tests: RuleTest[] }).tests.flatMap(
  (test) => test.alert_rule_test,
);

/** The metric names the service registers, as a scrape of GET /metrics lists them. */
async function servedMetricNames(): Promise<Set<string>> {
  const idle = () => ({ queued: 0, inFlight: 0 });
  const metrics = createMetrics({
    pool: () => ({ total: 0, idle: 0, waiting: 0 }),
    writes: idle,
    reads: idle,
    deletes: idle,
  });
  createWebhookMetrics(metrics.registry, async () => ({
    pending: 0,
    failed: 0,
    oldestDueSeconds: 0,
  }));
  return new Set((await metrics.registry.getMetricsAsJSON()).map(({ name }) => name));
}

/** GitHub's anchors of the headings of docs/operations.md. */
function operationsAnchors(): Set<string> {
  const text = projectFile('docs/operations.md').replace(/^```[\s\S]*?^```/gm, '');
  return new Set(
    [...text.matchAll(/^#{1,6} (.+)$/gm)].map(([, heading = '']) =>
      heading
        .replaceAll('`', '')
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\p{M}\p{Pc}\- ]/gu, '')
        .replaceAll(' ', '-'),
    ),
  );
}

/** A Kubernetes memory quantity in Mi, as bytes. */
const mebibytes = (quantity: string) => Number(/^(\d+)Mi$/.exec(quantity)?.[1]) * 1024 * 1024;

describe(rulesFile, () => {
  it('holds one group of alerts', () => {
    expect(otherGroups).toStrictEqual([]);
    expect(rules.length).toBeGreaterThanOrEqual(8);
  });

  it.each(rules)(
    '$alert waits, says how severe it is, sums itself up and links its runbook',
    (rule) => {
      expect(rule.for).toMatch(/^\d+[smh]$/);
      expect(['critical', 'warning']).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary).toBeTruthy();
      const runbook = rule.annotations?.runbook_url ?? '';
      expect(runbook).toBe(`docs/operations.md#${rule.alert.toLowerCase()}`);
      expect(operationsAnchors()).toContain(runbook.split('#')[1]);
    },
  );

  it('reads only metrics the service serves', async () => {
    const served = await servedMetricNames();
    const read = rules.flatMap(({ expr }) => [
      ...expr.matchAll(/\b(?:http|plant_store|process|nodejs)_\w+/g),
    ]);
    expect(read.length).toBeGreaterThan(rules.length);
    expect(read.map(([name]) => name).filter((name) => !served.has(name))).toStrictEqual([]);
  });

  it("warns of memory against the Kubernetes Deployment's memory limit", () => {
    const limit = parse(projectFile('deploy/kubernetes/deployment.yaml')).spec.template.spec
      .containers[0].resources.limits.memory as string;
    const expr = rules.find(({ alert }) => alert === 'PlantStoreMemoryNearLimit')?.expr ?? '';
    const [, mib = ''] = /\((\d+) \* 1024 \* 1024\)/.exec(expr) ?? [];
    expect(Number(mib) * 1024 * 1024).toBe(mebibytes(limit));
  });

  it.each(rules)('$alert is tested both firing and silent in alerts.test.yml', ({ alert }) => {
    const cases = ruleTests.filter(({ alertname }) => alertname === alert);
    expect(cases.some(({ exp_alerts }) => exp_alerts.length > 0)).toBe(true);
    expect(cases.some(({ exp_alerts }) => exp_alerts.length === 0)).toBe(true);
  });
});

// vitest.config.ts says in one line when promtool is missing and these are skipped.
describe.skipIf(promtoolPath === undefined)('promtool', () => {
  const promtool = (...args: string[]) =>
    execFileSync(promtoolPath ?? 'promtool', args, { cwd: projectRoot, encoding: 'utf8' });

  it(`accepts ${rulesFile}`, () => {
    expect(promtool('check', 'rules', rulesFile)).toContain(`SUCCESS: ${rules.length} rules found`);
  });

  it(`passes ${testsFile}`, () => {
    expect(promtool('test', 'rules', testsFile)).toContain('SUCCESS');
  });
});
