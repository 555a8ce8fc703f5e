// What the status page says of an assignment (observe/status.ts, http/status-page.ts), in the pool's
// words where the state alone misleads; and registrations under way counted as such (snapshot.ts).
import { describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { renderStatusPage } from "../../src/http/status-page.ts";
import { recentView, type Status } from "../../src/observe/status.ts";
import { takeSnapshot } from "../../src/observe/snapshot.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { assignment, giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";
import { backendSnapshot } from "../harness/metrics.ts";

const T = "2026-12-03T10:00:00Z";
const rec = (over: Partial<AssignmentRecord>) =>
  ({ id: "x", backend: "pod", state: "terminated", createdAt: T, receivedAt: T, updatedAt: T, contentHash: "", ...over }) as AssignmentRecord;

describe("recent assignments", () => {
  it("a job a warm runner ran reads 'ran on warm runner <id>', not terminated; a warm runner reads as one, with the job it ran or was given", async () => {
    const ran = recentView(rec({ id: "gitea-5-1", job: { repository: "acme/app" }, reason: "its job ran on warm runner warm-small-0-abc" }), Date.parse(T));
    expect(ran.note).toBe("ran on warm runner warm-small-0-abc");
    const warm = recentView(
      rec({ id: "warm-small-0-abc", state: "claimed", warm: true, placement: { pool: "small", backend: "pod" }, took: "gitea-5-1" }),
      Date.parse(T),
    );
    expect(warm).toMatchObject({ note: "warm runner of pool small, ran gitea-5-1", repository: null });
    const given = recentView(
      rec({
        id: "warm-small-1-abc",
        state: "claimed",
        warm: true,
        placement: { pool: "small", backend: "pod" },
        bound: { job: 7, attempt: 1, handle: "h", repository: "id-2/id-7", at: T },
      }),
      Date.parse(T),
    );
    expect(given).toMatchObject({ note: "warm runner of pool small, given job 7", repository: "id-2/id-7" });
    // Near miss: a job cancelled in Gitea is what its state says.
    expect(recentView(rec({ id: "gitea-6-1", job: { repository: "acme/app" }, reason: "cancelled" }), Date.parse(T)).note).toBeNull();

    const page: string = await renderStatusPage({
      at: T,
      problems: [],
      recent: [ran, warm],
      backends: [],
      pools: [],
      owners: [],
      cloud: [],
      stream: { messages: 0, published: 0, acked: 0 },
    } as Status);
    const row = (id: string) => page.split("<tr>").find((r) => r.startsWith(`<td class="t">${id}</td>`))!;
    expect(row("gitea-5-1")).toContain("ran on warm runner warm-small-0-abc");
    expect(row("gitea-5-1")).not.toContain("terminated");
    expect(row("warm-small-0-abc")).toContain("claimed (warm runner of pool small, ran gitea-5-1)");
    // No pools, no pool section; with one, the page says what a pool and its columns are.
    expect(String(page)).not.toContain("A pool is a kind of runner");
    const withPool: string = await renderStatusPage({
      at: T,
      problems: [],
      recent: [],
      backends: [],
      pools: [{ pool: "small", backend: "pod", target: 2, maxRunners: 10, idle: 1, busy: 1, booting: 0, warm: 1, startup: null }],
      owners: [],
      cloud: [],
      stream: { messages: 0, published: 0, acked: 0 },
    } as Status);
    expect(String(withPool)).toContain("A pool is a kind of runner named in RUNNER_POOLS");
    // A cloud backend's section says what its driver counted; a full project says so; others say nothing of it.
    const cloudPage = String(
      await renderStatusPage({
        at: T,
        problems: [],
        recent: [],
        backends: [backendSnapshot("vm"), backendSnapshot("pod")],
        pools: [],
        owners: [],
        cloud: [
          { backend: "vm", driver: "hetzner", full: true, fullTotal: 2, swept: 5, rate: { limit: 3600, remaining: 3500 } },
          { backend: "pod", driver: "ec2", full: true, fullTotal: 1, swept: 4 },
        ],
        stream: { messages: 0, published: 0, acked: 0 },
      } as Status),
    );
    const section = (name: string) => cloudPage.slice(cloudPage.indexOf(`<h2>Backend ${name}</h2>`)).split("</section>")[0]!;
    expect(section("vm")).toContain("Servers deleted by the sweep: 5; creates refused for the project's limit: 2, 3500 of 3600 API requests left this hour.");
    expect(section("vm")).toContain("The cloud project's server limit is reached");
    // EC2 in its own words: instances, the account.
    expect(section("pod")).toContain("Instances terminated by the sweep: 4; creates refused for the account's limit: 1.");
    expect(section("pod")).toContain("The EC2 account's instance or vCPU limit is reached: jobs wait for an instance to end.");
    expect(section("pod")).not.toMatch(/Servers|project/);
  });
});

describe("registrations under way", () => {
  it("count reservations whose record has no runner yet: one that registered, though its reservation lasts, is not under way", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    const d = createDispatcher({ config, gitea: stubGitea(), sink: { event: () => undefined, summary: () => undefined, error: () => undefined } });
    await d.withState(async ({ records, admission }) => {
      for (const id of ["r-1", "r-2"]) await records.offer(assignment(id));
      const { reserved } = await admission.acquireMany("pod", ["r-1", "r-2"], new Set(["r-1", "r-2"]));
      expect([...reserved].sort()).toEqual(["r-1", "r-2"]);
      await records.update("r-1", (r) => ({ ...r, runner: { id: 1, name: "gdr-r-1", registeredAt: T, sealed: "x" } }));
    });
    const snapshot = await takeSnapshot(d);
    expect(snapshot.backends.find((b) => b.backend === "pod")).toMatchObject({ slotsInUse: 2, registering: 1 });
  });
});

describe("the Actions cache section", () => {
  const base = { at: T, problems: [], recent: [], backends: [], pools: [], owners: [], cloud: [], stream: { messages: 0, published: 0, acked: 0 } };
  it("per repository, with sizes for people; 'on, unused' with no figures; nothing while the cache is off", async () => {
    const figures = {
      hits: 7,
      misses: 2,
      bytesIn: 3 * 1024 ** 3,
      bytesOut: 1536,
      evictions: 1,
      refused: { size: 1, scope: 2 },
      entries: 4,
      bytesStored: 5 * 1024 ** 2,
    };
    const page = String(await renderStatusPage({ ...base, cache: [{ repository: "acme/app", figures }] } as Status));
    const row = page.split("<tr>").find((r) => r.startsWith('<td class="t">acme/app</td>'))!;
    expect(row.match(/<td class="n">([^<]*)<\/td>/g)!.map((c) => c.replace(/<[^>]+>/g, ""))).toEqual([
      "7",
      "2",
      "4",
      "5.0 MiB",
      "3.0 GiB",
      "1.5 KiB",
      "1",
      "3",
    ]);
    expect(String(await renderStatusPage({ ...base, cache: [] } as Status))).toContain("On; no repository has used it yet.");
    expect(String(await renderStatusPage(base as Status))).not.toContain("Actions cache");
  });
});
