// A job's start-up time (pools/taken.ts observeStartup), over in-memory fakes of the stores it
// uses: timed from its own record's receipt, which the claim hands over when it read it.
import { describe, expect, inject, it } from "vitest";
import { observeStartup, observeStartups } from "../../src/pools/taken.ts";
import type { Startup } from "../../src/state/startup-times.ts";
import { startVia, type WarmPart } from "../../src/state/record.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { handleWorkflowJob, parseWorkflowJob } from "../../src/forge/gitea/webhook.ts";
import { assignment, giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { inProgressFixture } from "../harness/fixtures.ts";
import { stubGitea } from "../harness/gitea-stub.ts";
import { written } from "../harness/memory.ts";

function fakes(receivedAt: string | null) {
  const reads: string[][] = [];
  const seen: [string, readonly number[]][] = [];
  const vias: (string | undefined)[] = [];
  const state = {
    records: {
      getMany: async (ids: readonly string[]) => {
        reads.push([...ids]);
        return new Map(receivedAt === null ? [] : ids.map((id) => [id, { value: { id, receivedAt }, revision: 1 }]));
      },
    },
    startups: {
      observe: async (pool: string, s: readonly Startup[]) => {
        seen.push([pool, s.map((x) => x.seconds)]);
        vias.push(...s.map((x) => x.via));
      },
    },
  };
  const d = { withState: <T>(fn: (s: typeof state) => Promise<T>) => fn(state) } as unknown as Parameters<typeof observeStartup>[0];
  return { d, reads, seen, vias };
}

describe("observeStartup", () => {
  const at = Date.parse("2026-12-03T10:00:10Z");
  it("with the claim's queuedAt, reads no record", async () => {
    const { d, reads, seen } = fakes("2026-12-03T10:00:00Z");
    await observeStartup(d, { pool: "p", own: "gitea-1-1", at, queuedAt: "2026-12-03T10:00:04Z" });
    expect(reads).toEqual([]);
    expect(seen).toEqual([["p", [6]]]);
  });
  it("near miss: without it (another runner took the job), its own record is read", async () => {
    const { d, reads, seen } = fakes("2026-12-03T10:00:00Z");
    await observeStartup(d, { pool: "p", own: "gitea-1-1", at });
    expect(reads).toEqual([["gitea-1-1"]]);
    expect(seen).toEqual([["p", [10]]]);
  });
  it("a record gone: timed from the payload's created_at; a time that does not parse is no time", async () => {
    const gone = fakes(null);
    await observeStartup(gone.d, { pool: "p", own: "gitea-1-1", at, createdAt: "2026-12-03T10:00:08Z" });
    expect(gone.seen).toEqual([["p", [2]]]);
    const bad = fakes(null);
    await observeStartup(bad.d, { pool: "p", own: "gitea-1-1", at, createdAt: "not a time" });
    expect(bad.seen).toEqual([]);
  });
  it("a batch: one read for the records not handed over, one write per pool, each with how its runner came", async () => {
    const { d, reads, seen, vias } = fakes("2026-12-03T10:00:00Z");
    await observeStartups(d, [
      { pool: "p", own: "gitea-1-1", at, queuedAt: "2026-12-03T10:00:09Z", via: "reuse" },
      { pool: "q", own: "gitea-2-1", at, via: "rebuilt" },
      { pool: "p", own: "gitea-3-1", at },
      { pool: "p", own: "gitea-4-1", at: at - 5_000, queuedAt: "2026-12-03T10:00:08Z" },
    ]);
    expect(reads).toEqual([["gitea-2-1", "gitea-3-1"]]);
    expect(seen.toSorted()).toEqual([
      ["p", [1, 10]],
      ["q", [10]],
    ]);
    expect(vias.toSorted()).toEqual(["rebuilt", "reuse", undefined]);
  });
});

describe("an in_progress webhook hands its claim's queuedAt to the start-up observation", () => {
  const inProgress = (job: number, runner: number, name: string) => {
    const p = structuredClone(inProgressFixture);
    Object.assign(p.workflow_job, { id: job, runner_id: runner, runner_name: name });
    return parseWorkflowJob(p);
  };
  /** A dispatcher on the test's NATS, with no Gitea behind it. */
  const dispatcher = async () =>
    createDispatcher({
      config: await provisionEnv(giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9")),
      gitea: stubGitea(),
      sink: { event: () => undefined, summary: () => undefined, error: () => undefined },
    });
  /** Assignment `id`'s runner (Gitea runner `runner`) up and waiting for its claim, its record saying how it came. */
  const ready = (d: Awaited<ReturnType<typeof dispatcher>>, id: string, runner: number, came: WarmPart = {}) =>
    d.withState(async ({ records }) => {
      await records.offer(assignment(id));
      return records.update(id, (r) =>
        written({
          ...r,
          state: "backend_ready",
          readyAt: new Date().toISOString(),
          placement: { pool: "route-0", backend: "pod" },
          runner: { id: runner, name: `gdr-${id}`, registeredAt: new Date().toISOString(), sealed: "x" },
          ...came,
        }),
      );
    });
  it("when the runner made for the job took it; not when it took another job (near miss)", async () => {
    const d = await dispatcher();
    const own = await ready(d, "gitea-9101-1", 51);
    const mine = await handleWorkflowJob(d, inProgress(9101, 51, "gdr-gitea-9101-1"));
    expect(mine.started).toMatchObject({ pool: "route-0", own: "gitea-9101-1", queuedAt: own!.receivedAt, via: "new" });
    await ready(d, "gitea-9102-1", 52);
    const other = await handleWorkflowJob(d, inProgress(9103, 52, "gdr-gitea-9102-1"));
    expect(other.started).toMatchObject({ pool: "route-0", own: "gitea-9103-1" });
    expect(other.started?.queuedAt).toBeUndefined();
  });

  it("with how the claiming runner came, from its record: warm by reuse, rebuilt on demand, warm", async () => {
    const d = await dispatcher();
    const cases: [number, WarmPart, string][] = [
      [9201, { warm: true, reuse: { server: 4 } }, "reuse"],
      [9202, { made: "rebuilt" }, "rebuilt"],
      [9203, { warm: true }, "warm"],
    ];
    for (const [job, came, via] of cases) {
      const id = `gitea-${job}-1`;
      await ready(d, id, job, came);
      expect((await handleWorkflowJob(d, inProgress(job, job, `gdr-${id}`))).started?.via).toBe(via);
    }
  });
});

describe("startVia", () => {
  it.each<[WarmPart, string]>([
    [{}, "new"],
    [{ warm: true }, "warm"],
    [{ made: "rebuilt" }, "rebuilt"],
    // A warm runner on a parked server rebuilt on demand (its job taken meanwhile) is still rebuilt: the boot was a rebuild's.
    [{ warm: true, made: "rebuilt" }, "rebuilt"],
    [{ warm: true, reuse: { server: 1 } }, "reuse"],
    [{ warm: true, reuse: { server: 1 }, made: "rebuilt" }, "reuse"],
  ])("%j → %s", (r, via) => expect(startVia(r)).toBe(via));
});
