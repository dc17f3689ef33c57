import { TARGETS, type Target } from './options.js';
import type { RunResult } from './report.js';

// A small SVG of two line charts (throughput and p99 latency against connections), written by
// hand: a handful of lines and points needs no charting library.

const COLORS: Record<Target, string> = {
  floor: '#7f7f7f',
  service: '#1f77b4',
  'service+webhooks': '#17becf',
  'service-traced': '#bcbd22',
  'service-unbatched': '#ff7f0e',
  'http-ceiling': '#2ca02c',
  pgbench: '#d62728',
  'get-by-id': '#9467bd',
  'get-by-id-unbatched': '#8c564b',
  'get-page': '#e377c2',
};

/** Legend entries per row, under the panels. */
const LEGEND_COLUMNS = 4;

const PANEL = { width: 460, height: 330, left: 70, right: 20, top: 40, bottom: 50 };

function escapeXml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');
}

/** Axis ticks at 1, 2 or 5 times a power of ten, from 0 past `max`. */
function ticks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const rough = max / 5;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power;
  const list: number[] = [];
  for (let value = 0; value < max + step; value += step) list.push(value);
  return list;
}

const label = (value: number) =>
  value >= 1000 ? `${value / 1000}k` : Number.isInteger(value) ? String(value) : value.toFixed(1);

interface Panel {
  title: string;
  yTitle: string;
  value: (run: RunResult) => number | null | undefined;
}

function panel(panelSpec: Panel, runs: RunResult[], levels: number[], offsetX: number): string {
  const { width, height, left, right, top, bottom } = PANEL;
  const plotWidth = width - left - right;
  const plotHeight = height - top - bottom;
  const points = (target: Target) =>
    levels.flatMap((connections, index) => {
      const run = runs.find((r) => r.target === target && r.connections === connections);
      const value = run?.status === 'ok' ? panelSpec.value(run) : undefined;
      return value === null || value === undefined ? [] : [{ index, connections, value }];
    });
  const all = TARGETS.flatMap((target) => points(target).map((point) => point.value));
  const yTicks = ticks(Math.max(0, ...all));
  const yMax = yTicks[yTicks.length - 1] ?? 1;
  // The levels are spaced evenly: with 1, 16, 64, 256 that is close to a log scale.
  const x = (index: number) =>
    left + (levels.length === 1 ? plotWidth / 2 : (index * plotWidth) / (levels.length - 1));
  const y = (value: number) => top + plotHeight - (value / yMax) * plotHeight;

  const parts: string[] = [`<g transform="translate(${offsetX},0)">`];
  parts.push(
    `<text x="${left + plotWidth / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(panelSpec.title)}</text>`,
  );
  for (const tick of yTicks) {
    parts.push(
      `<line x1="${left}" x2="${left + plotWidth}" y1="${y(tick)}" y2="${y(tick)}" stroke="#e0e0e0"/>`,
      `<text x="${left - 8}" y="${y(tick) + 4}" text-anchor="end" font-size="11">${label(tick)}</text>`,
    );
  }
  levels.forEach((connections, index) => {
    parts.push(
      `<line x1="${x(index)}" x2="${x(index)}" y1="${top + plotHeight}" y2="${top + plotHeight + 5}" stroke="#333"/>`,
      `<text x="${x(index)}" y="${top + plotHeight + 19}" text-anchor="middle" font-size="11">${connections}</text>`,
    );
  });
  parts.push(
    `<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotHeight}" stroke="#333"/>`,
    `<line x1="${left}" x2="${left + plotWidth}" y1="${top + plotHeight}" y2="${top + plotHeight}" stroke="#333"/>`,
    `<text x="${left + plotWidth / 2}" y="${height - 8}" text-anchor="middle" font-size="12">connections (pgbench: clients)</text>`,
    `<text transform="translate(16,${top + plotHeight / 2}) rotate(-90)" text-anchor="middle" font-size="12">${escapeXml(panelSpec.yTitle)}</text>`,
  );
  for (const target of TARGETS) {
    const series = points(target);
    if (series.length === 0) continue;
    const color = COLORS[target];
    const path = series.map((p) => `${x(p.index).toFixed(1)},${y(p.value).toFixed(1)}`).join(' ');
    parts.push(
      `<polyline points="${path}" fill="none" stroke="${color}" stroke-width="2.5"/>`,
      ...series.map(
        (p) =>
          `<circle cx="${x(p.index).toFixed(1)}" cy="${y(p.value).toFixed(1)}" r="4" fill="${color}"><title>${target}, ${p.connections} connections: ${p.value.toFixed(2)}</title></circle>`,
      ),
    );
  }
  parts.push('</g>');
  return parts.join('\n');
}

export function chartSvg(runs: RunResult[], levels: number[], caption: string): string {
  const panels: Panel[] = [
    {
      title: 'Throughput',
      yTitle: 'successful requests (pgbench: transactions) / s',
      value: (run) => run.throughput,
    },
    { title: 'p99 latency', yTitle: 'ms', value: (run) => run.p99Ms },
  ];
  const width = PANEL.width * panels.length;
  const present = TARGETS.filter((target) => runs.some((run) => run.target === target));
  const legendRows = Math.max(1, Math.ceil(present.length / LEGEND_COLUMNS));
  const height = PANEL.height + 25 + 25 * legendRows;
  const legend = present.map(
    (target, index) =>
      `<g transform="translate(${PANEL.left + (index % LEGEND_COLUMNS) * 180},${PANEL.height + 10 + 22 * Math.floor(index / LEGEND_COLUMNS)})"><rect width="14" height="14" fill="${COLORS[target]}"/><text x="20" y="12" font-size="12">${target}</text></g>`,
  );
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...panels.map((spec, index) => panel(spec, runs, levels, index * PANEL.width)),
    ...legend,
    `<text x="${width - 10}" y="${height - 10}" text-anchor="end" font-size="10" fill="#666">${escapeXml(caption)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
