import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package root: the nearest folder above this file with a package.json. The bench runs
 * compiled from dist-bench/bench/, so a fixed number of `../` would tie it to that layout.
 */
function findProjectRoot(): string {
  let folder = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(folder, 'package.json'))) {
    const parent = dirname(folder);
    if (parent === folder) throw new Error('no package.json above the bench scripts');
    folder = parent;
  }
  return folder;
}

export const projectRoot = findProjectRoot();

/** The service as `npm run build` compiles it. */
export const distFolder = join(projectRoot, 'dist');

/** The compiled bench scripts (bench/tsconfig.json). */
export const benchBuildFolder = join(projectRoot, 'dist-bench', 'bench');
