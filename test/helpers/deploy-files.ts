import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { projectRoot } from './process.js';

/** Reads a file of the project, by its path from the project root. */
export function projectFile(path: string): string {
  return readFileSync(join(projectRoot, path), 'utf8');
}

// docker-compose.yml ---------------------------------------------------------------------

export interface ComposeService {
  image?: string;
  command?: string | string[];
  environment?: Record<string, string> | string[];
  stop_grace_period?: string;
  ports?: string[];
}

export interface ComposeFile {
  services: Record<string, ComposeService>;
}

/** docker-compose.yml, or another compose file of the project. */
export function readCompose(file = 'docker-compose.yml'): ComposeFile {
  return parse(projectFile(file)) as ComposeFile;
}

/**
 * The `command` of a compose service: the arguments of the image's entrypoint (node). Only the
 * exec (list) form is accepted, because a string would be split by Compose's own rules.
 */
export function composeCommand(service: string): string[] {
  const command = readCompose().services[service]?.command;
  if (!Array.isArray(command)) {
    throw new Error(`docker-compose.yml: service ${service} has no command in list form`);
  }
  return command;
}

// Dockerfile -----------------------------------------------------------------------------

export interface DockerInstruction {
  /** Upper case: FROM, COPY, RUN, ... */
  keyword: string;
  /** `--name=value` flags, such as COPY's `--from`. */
  flags: Record<string, string>;
  /** The arguments after the flags: a JSON array as its elements, otherwise split on spaces. */
  args: string[];
  /** Everything after the keyword, as written (continuations joined). */
  text: string;
}

export interface DockerStage {
  /** The `AS` name, if any. */
  name: string | undefined;
  instructions: DockerInstruction[];
}

function parseInstruction(line: string): DockerInstruction {
  const match = /^(\S+)\s*(.*)$/s.exec(line.trim());
  const keyword = (match?.[1] ?? '').toUpperCase();
  const text = match?.[2] ?? '';
  const flag = /^--([\w-]+)(?:=(\S*))?\s*/;
  const flags: Record<string, string> = {};
  let rest = text;
  for (let found = flag.exec(rest); found; found = flag.exec(rest)) {
    flags[found[1] as string] = found[2] ?? '';
    rest = rest.slice(found[0].length);
  }
  const args = rest.startsWith('[')
    ? (JSON.parse(rest) as string[])
    : rest.split(/\s+/).filter((arg) => arg !== '');
  return { keyword, flags, args, text };
}

/** The Dockerfile's build stages in order; the last one is the image. */
export function readDockerfileStages(): DockerStage[] {
  const lines: string[] = [];
  let pending = '';
  for (const raw of projectFile('Dockerfile').split(/\r?\n/)) {
    if (/^\s*#/.test(raw)) continue;
    if (raw.endsWith('\\')) {
      pending += `${raw.slice(0, -1)} `;
      continue;
    }
    const line = (pending + raw).trim();
    pending = '';
    if (line !== '') lines.push(line);
  }
  const stages: DockerStage[] = [];
  for (const line of lines) {
    const instruction = parseInstruction(line);
    if (instruction.keyword === 'FROM') {
      const as = instruction.args.findIndex((arg) => arg.toUpperCase() === 'AS');
      stages.push({ name: as >= 0 ? instruction.args[as + 1] : undefined, instructions: [] });
    }
    const stage = stages.at(-1);
    if (!stage) throw new Error(`Dockerfile: ${instruction.keyword} before the first FROM`);
    stage.instructions.push(instruction);
  }
  return stages;
}

export function instructionsOf(stage: DockerStage, keyword: string): DockerInstruction[] {
  return stage.instructions.filter((instruction) => instruction.keyword === keyword);
}

/** The stage the image is made of: the last one. */
export function runtimeStage(stages = readDockerfileStages()): DockerStage {
  const stage = stages.at(-1);
  if (!stage) throw new Error('Dockerfile: no stage');
  return stage;
}

/** The image's default command (exec form only: the runtime image has no shell). */
export function imageCommand(stage = runtimeStage()): string[] {
  const cmd = instructionsOf(stage, 'CMD').at(-1);
  if (!cmd?.text.startsWith('[')) throw new Error('Dockerfile: no CMD in exec form');
  return cmd.args;
}

/** The stage's ENV variables (`ENV NAME=value ...` or `ENV NAME value`). */
export function stageEnvironment(stage: DockerStage): Record<string, string> {
  const environment: Record<string, string> = {};
  for (const { args, text } of instructionsOf(stage, 'ENV')) {
    if (args[0]?.includes('=')) {
      for (const [, name = '', quoted, bare] of text.matchAll(/(\w+)=(?:"([^"]*)"|(\S*))/g)) {
        environment[name] = quoted ?? bare ?? '';
      }
    } else if (args[0]) {
      environment[args[0]] = args.slice(1).join(' ');
    }
  }
  return environment;
}

/** The stage's WORKDIR (the last one; `/` when it sets none). */
export function stageWorkdir(stage: DockerStage): string {
  return instructionsOf(stage, 'WORKDIR').at(-1)?.args[0] ?? '/';
}
