// The bench's comparison with the stored run (bench/compare.mjs): which way each figure is better,
// the 10 % line by its near misses (exactly 10 % is not marked, a little more is), figures that a
// run lacks left out, and the table's mark.
import { describe, expect, it } from "vitest";
import { changeTable, compareRuns, FIGURES } from "../../bench/compare.mjs";

const run = (reconcile: number, ttr: number) => ({ reconcile: { assignmentsPerSec: reconcile }, ttr: { rtt50: { p50Ms: ttr } } });
const two = FIGURES.filter((f) => f.name.startsWith("reconcile") || f.name.startsWith("time to runner, 50 ms"));

describe("compareRuns", () => {
  it("a rate is worse when it falls, a time when it grows; exactly 10 % is not marked, a little more is", () => {
    expect(compareRuns(run(200, 200), run(180, 220), two).map((r) => r.worse)).toEqual([false, false]);
    expect(compareRuns(run(200, 200), run(179, 221), two).map((r) => r.worse)).toEqual([true, true]);
    // Better either way is never marked.
    expect(compareRuns(run(200, 200), run(400, 100), two).map((r) => r.worse)).toEqual([false, false]);
    expect(compareRuns(run(200, 200), run(179, 221), two)[0]).toMatchObject({ before: 200, after: 179, change: -0.105 });
  });

  it("leaves out a figure either run lacks, or holds as no number", () => {
    expect(compareRuns({ reconcile: { assignmentsPerSec: 100 } }, run(90, 10), two).map((r) => r.name)).toEqual([two[0]!.name]);
    expect(compareRuns(run(100, 10), { reconcile: { assignmentsPerSec: "n/a" } }, two)).toEqual([]);
    expect(compareRuns(undefined, run(1, 1), two)).toEqual([]);
  });

  it("from zero: a time that appears is worse, a rate that appears is not", () => {
    const [rate, time] = compareRuns(run(0, 0), run(5, 5), two);
    expect([rate!.worse, time!.worse]).toEqual([false, true]);
  });

  it("the table marks each worse figure and says how many", () => {
    const table = changeTable(compareRuns(run(200, 200), run(150, 200), two), "2026-12-04T18:01:00Z");
    expect(table).toContain("1 figure more than 10 % worse");
    expect(table).toContain("| reconcile, k=1000 (acked/s) | 200 | 150 | -25 % | **worse by more than 10 %** |");
    expect(table).toMatch(/time to runner, 50 ms RTT, p50 \(ms\) \| 200 \| 200 \| \+0 % \|  \|/);
  });

  it("every figure names a number the stored run has", async () => {
    const { readFileSync } = await import("node:fs");
    const stored = JSON.parse(readFileSync("bench/results/latest.json", "utf8"));
    const missing = FIGURES.filter((f) => typeof f.at(stored) !== "number").map((f) => f.name);
    expect(missing).toEqual([]);
  });
});
