import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findOnPath } from '../helpers/cluster.js';
import { projectRoot } from '../helpers/process.js';

describe('deploy/compose/haproxy.cfg', () => {
  it('is a configuration HAProxy accepts', () => {
    const haproxy = findOnPath('haproxy');
    if (!haproxy) throw new Error('npm run test:scale needs haproxy (Debian package haproxy)');
    const check = spawnSync(haproxy, ['-c', '-f', 'deploy/compose/haproxy.cfg'], {
      cwd: projectRoot,
      encoding: 'utf8',
    });
    expect(check.stderr + check.stdout).toContain('Configuration file is valid');
    expect(check.status).toBe(0);
  });
});
