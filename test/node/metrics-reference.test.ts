// docs/metrics.md against what /metrics serves (formatMetrics, with pools and Forgejo on so that
// every metric is there): the same names, types and labels, both ways.
import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { everyMetric } from "../harness/metrics.ts";
import { formatMetrics } from "../../src/observe/metrics.ts";

const served = everyMetric();

/** name → "type | labels" as /metrics serves it (a histogram's series folded into its name). */
function fromMetrics(text: string): Map<string, string> {
  const out = new Map<string, string>();
  const labels = new Map<string, Set<string>>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    out.set(name!, type!);
    labels.set(name!, new Set());
  }
  for (const [, series, body] of text.matchAll(/^(gdr_[a-z_]+)(?:\{([^}]*)\})? /gm)) {
    const name = [...labels.keys()].find(
      (n) => series === n || (out.get(n) === "histogram" && /^_(bucket|sum|count)$/.test(series!.slice(n.length)) && series!.startsWith(n)),
    );
    for (const [, key] of (body ?? "").matchAll(/(\w+)="/g)) labels.get(name!)!.add(key!);
  }
  return new Map([...out].map(([n, t]) => [n, `${t} | ${[...labels.get(n)!].sort().join(", ")}`]));
}

/** The same from the reference table's rows. */
function fromDocs(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const [, name, type, labels] of text.matchAll(/^\|\s*`(gdr_[a-z_]+)`\s*\|\s*(\w+)\s*\|([^|]*)\|/gm)) {
    const keys = [...labels!.matchAll(/`(\w+)`/g)].map((m) => m[1]!).sort();
    out.set(name!, `${type} | ${keys.join(", ")}`);
  }
  return out;
}

it("docs/metrics.md lists every metric /metrics serves, with its type and labels, and none it does not", () => {
  const served_ = fromMetrics(served);
  expect(served_.size).toBeGreaterThan(20);
  expect(Object.fromEntries(fromDocs(readFileSync("docs/metrics.md", "utf8")))).toEqual(Object.fromEntries(served_));
});

it("the comparison itself notices a missing label and a metric too many", () => {
  const docs = readFileSync("docs/metrics.md", "utf8");
  expect(Object.fromEntries(fromDocs(docs.replace(/^(\|\s*`gdr_assignments`\s*\|\s*gauge\s*\|\s*`backend`), `state`/m, "$1")))).not.toEqual(
    Object.fromEntries(fromMetrics(served)),
  );
  expect(fromDocs(`${docs}\n| \`gdr_extra\` | gauge | | x |\n`).size).toBe(fromMetrics(served).size + 1);
});

it("the start-ups by via: `new` for every pool from the first scrape, the others once seen, each with its own counts", () => {
  const h = (count: number) => ({ buckets: Array(19).fill(count), sum: count, count });
  const text = formatMetrics({
    stream: { messages: 0, published: 0, acked: 0 },
    backends: [],
    pools: [
      { pool: "vms", backend: "vm", target: 0, maxRunners: null, idle: 0, busy: 0, booting: 0, warm: 0, startup: { ...h(3), via: { reuse: h(2), new: h(1) } } },
      { pool: "pods", backend: "pod", target: 0, maxRunners: null, idle: 0, busy: 0, booting: 0, warm: 0, startup: null },
    ],
    owners: [],
    cloud: [],
  });
  const counts = text.split("\n").filter((l) => l.startsWith("gdr_job_startup_by_via_duration_seconds_count"));
  expect(counts).toEqual([
    'gdr_job_startup_by_via_duration_seconds_count{pool="vms",via="reuse"} 2',
    'gdr_job_startup_by_via_duration_seconds_count{pool="vms",via="new"} 1',
    'gdr_job_startup_by_via_duration_seconds_count{pool="pods",via="new"} 0',
  ]);
});
