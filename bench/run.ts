// `npm run bench -- [suite]`: the one benchmark harness. It creates a database of its own on the
// PostgreSQL at BENCH_DATABASE_URL (dropped however the run ends), runs the suite named by the
// first argument or BENCH_SUITE, and writes its report to BENCH_RESULTS_DIR (bench/results):
//
// - targets (the default): the service against bare Fastify, the HTTP stack without I/O and
//   pgbench, creates and reads, at each concurrency level (latest.md);
// - start: `npm start` to the first /readyz 200, on each engine (start.md);
// - engines: start and creates on the server and on the embedded engine (engines.md);
// - pooler: what DB_POOLER costs, straight on PostgreSQL and through PgBouncer (pooler.md);
// - soak: minutes of steady load, the service's memory over them (soak.md).
import { loadavg } from 'node:os';
import { relative } from 'node:path';
import { cleanUpOnExit } from './cleanup.js';
import { commandLine, machineFacts } from './facts.js';
import { type BenchOptions, readBenchOptions, redactUrl, type Suite } from './options.js';
import { projectRoot } from './paths.js';
import { poolerSuite } from './pooler.js';
import { type SuiteReport, writeReport } from './report.js';
import { openSession, type Session, say } from './session.js';
import { soakSuite } from './soak.js';
import { enginesSuite, startSuite } from './starts.js';
import { targetsSuite } from './targets.js';

const SUITES: Record<
  Suite,
  { file: string; migrated: boolean; run: (session: Session) => Promise<SuiteReport> }
> = {
  targets: { file: 'latest.md', migrated: true, run: targetsSuite },
  // Both time the start that migrates a new database.
  start: { file: 'start.md', migrated: false, run: startSuite },
  engines: { file: 'engines.md', migrated: false, run: enginesSuite },
  pooler: { file: 'pooler.md', migrated: true, run: poolerSuite },
  soak: { file: 'soak.md', migrated: true, run: soakSuite },
};

const { scratch, abort, runAndExit } = cleanUpOnExit('bench', say);

async function bench(options: BenchOptions): Promise<number> {
  const suite = SUITES[options.suite];
  const date = new Date().toISOString();
  const loadAtStart = loadavg();
  const session = await openSession(options, scratch, abort.signal, suite.migrated);
  try {
    const report = await suite.run(session);
    // An interrupted run leaves the last results file alone rather than write a partial one.
    if (abort.signal.aborted) throw new Error('interrupted');
    const path = writeReport(
      options.resultsFolder,
      suite.file,
      {
        date,
        command: commandLine(process.argv.slice(2)),
        machine: {
          ...machineFacts(session.postgresVersion),
          'load average at start': loadAtStart.map((value) => value.toFixed(2)).join(', '),
        },
      },
      {
        ...report,
        settings: { ...report.settings, 'database server': redactUrl(options.databaseUrl) },
      },
    );
    say(`\nwrote ${path.startsWith(projectRoot) ? relative(projectRoot, path) : path}`);
    return report.failed ? 1 : 0;
  } finally {
    await session.admin.end().catch(() => {});
  }
}

await runAndExit(() => readBenchOptions(process.env, process.argv.slice(2)), bench);
