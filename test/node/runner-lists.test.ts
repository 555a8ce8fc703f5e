// Runner lists read page by page are never taken as whole by mistake: a runner deleted between two
// page reads shifts the rest, so one of ours can fall between pages. A runner of ours is gone only
// when Gitea or Forgejo says so for that runner; a list longer than the pages read says nothing of
// the rest. Against the real nats-server, with the forges' clients stubbed (their paging is the
// subject here, and the fakes' lists cannot be made to shift on cue).
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { cleanForgejoRunners } from "../../src/forge/forgejo/cleanup.ts";
import type { ForgejoClient, ListedRunner } from "../../src/forge/forgejo/client.ts";
import { endGhosts } from "../../src/pools/ghosts.ts";
import { maintainPools } from "../../src/pools/maintain.ts";
import { assignment, forgejoTestEnv, poolsTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const events: string[] = [];
const sink = { event: (e: { event: string }) => void events.push(e.event), summary: () => undefined, error: () => undefined };
const longAgo = () => new Date(Date.now() - 10 * 60_000).toISOString();
/** `n` runners of others, ids from `from`. */
const others = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ id: from + i, name: `someone-${from + i}` }));

describe("Gitea: a warm runner the list does not show", () => {
  async function warmRunner(pages: { id: number; name: string }[][], seen: () => boolean | "error", jobPages = 5) {
    const env = poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 1 }], {
      CAPACITY_VM: 0,
      GITEA_JOB_PAGES: jobPages,
    });
    await provisionEnv(env);
    const gitea = stubGitea();
    const asked: number[] = [];
    // Gitea's total_count: every runner of the scope, whatever the page size.
    gitea.listRunners = async (page) => ({ total: pages.flat().length, items: pages[page - 1] ?? [] });
    gitea.getRunner = async ({ id }) => {
      asked.push(id);
      const answer = seen();
      if (answer === "error") throw new Error("gitea: 502 bad gateway");
      return answer ? ({ id, busy: false } as Awaited<ReturnType<typeof gitea.getRunner>>) : null;
    };
    const d = createDispatcher({ config: loadConfig(env), sink, gitea });
    const w = await d.withState(async (state) => {
      await maintainPools(d, state);
      const [p0] = (await state.warm.list()).get("small")!;
      await state.records.update(p0!.id, (r) =>
        written({
          ...r,
          warm: true,
          state: "backend_ready",
          readyAt: longAgo(),
          runner: { id: 77, name: `gdr-${p0!.id}`, registeredAt: longAgo(), sealed: "x" },
        }),
      );
      return p0!.id;
    });
    const ended = await d.withState((state) => endGhosts(d, state));
    return { ended, asked, state: (await d.withState(({ records }) => records.get(w)))?.state };
  }

  it("missing from a list of two pages (a shift) is asked about, and kept while Gitea has it", async () => {
    expect(await warmRunner([others(1000, 50), others(1050, 10)], () => true)).toEqual({ ended: 0, asked: [77], state: "backend_ready" });
  });

  it("near miss: Gitea answers it has none: ended as gone", async () => {
    expect(await warmRunner([others(1000, 50), others(1050, 10)], () => false)).toEqual({ ended: 1, asked: [77], state: "terminated" });
  });

  it("a lookup of that runner that fails (an error, a timeout) leaves it alone: only a definite 'not found' ends it", async () => {
    expect(await warmRunner([others(1000, 50), others(1050, 10)], () => "error")).toEqual({ ended: 0, asked: [77], state: "backend_ready" });
  });

  it("a list longer than the pages read ends nothing, and asks nothing", async () => {
    expect(await warmRunner([others(1000, 50), others(1050, 50), others(1100, 5)], () => false, 2)).toEqual({ ended: 0, asked: [], state: "backend_ready" });
  });
});

describe("Forgejo: a runner an assignment waits on that the list does not show", () => {
  async function waitingOnRunner(pages: ListedRunner[][], seen: () => boolean, read: number[] = [], total?: number) {
    const env = forgejoTestEnv(nats, backendUrl, "http://127.0.0.1:9", { CLEANUP_GRACE_MS: 0 });
    const config = await provisionEnv(env);
    const asked: number[] = [];
    const client = {
      listRunners: async (_scope: unknown, page: number) => (read.push(page), { items: pages[page - 1] ?? [], ...(total === undefined ? {} : { total }) }),
      getRunner: async (_scope: unknown, id: number) => (asked.push(id), seen() ? { id } : null),
      deleteRunner: async () => undefined,
    } as unknown as ForgejoClient;
    const d = createDispatcher({ config, sink });
    const summary = await d.withState(async (state) => {
      await state.records.offer(assignment("forgejo-5-1"));
      expect(await state.admission.acquire("pod", "forgejo-5-1")).toBe(true);
      await state.records.update("forgejo-5-1", (r) =>
        written({
          ...r,
          state: "backend_ready",
          readyAt: longAgo(),
          runner: { id: 5, name: "gdr-forgejo-5-1", registeredAt: longAgo(), sealed: "x" },
        }),
      );
      return cleanForgejoRunners(d, client, config.forgejo!, state);
    });
    return { forgotten: summary.forgotten, asked, runner: (await d.withState(({ records }) => records.get("forgejo-5-1")))?.runner?.id ?? null };
  }

  it("missing from a list of two pages (a shift) is asked about, and kept while Forgejo has it", async () => {
    expect(await waitingOnRunner([others(100, 50), others(150, 3)], () => true)).toEqual({ forgotten: 0, asked: [5], runner: 5 });
  });

  it("near miss: Forgejo answers it has none: its identity is forgotten and its workload torn down", async () => {
    expect(await waitingOnRunner([others(100, 50), others(150, 3)], () => false)).toEqual({ forgotten: 1, asked: [5], runner: null });
  });

  it("a first page of exactly 50 is not the whole list: the next page is read, and a runner found there is present", async () => {
    const read: number[] = [];
    expect(await waitingOnRunner([others(100, 50), [{ id: 5, name: "listed-5" }]], () => false, read)).toEqual({ forgotten: 0, asked: [], runner: 5 });
    // Without X-Total-Count only an empty page says the list is done.
    expect(read).toEqual([1, 2, 3]);
  });

  it("near miss: exactly 50 then none: the list is whole after the empty page, and absence is asked about", async () => {
    const read: number[] = [];
    expect(await waitingOnRunner([others(100, 50), []], () => true, read)).toEqual({ forgotten: 0, asked: [5], runner: 5 });
    expect(read).toEqual([1, 2]);
  });

  // Forgejo caps a page at [api].MAX_RESPONSE_ITEMS (services/convert/utils.go:15-22 at v15.0.3; default 50, often lower).
  it("pages shorter than asked (MAX_RESPONSE_ITEMS 20) are read on until an empty page: a runner on the third is present", async () => {
    const read: number[] = [];
    const pages = [others(100, 20), others(120, 20), [...others(140, 19), { id: 5, name: "listed-5" }], []];
    expect(await waitingOnRunner(pages, () => false, read)).toEqual({ forgotten: 0, asked: [], runner: 5 });
    expect(read).toEqual([1, 2, 3, 4]);
  });

  it("with X-Total-Count the last short page ends the list: no empty page is asked for", async () => {
    const read: number[] = [];
    expect(await waitingOnRunner([others(100, 20), others(120, 5)], () => true, read, 25)).toEqual({ forgotten: 0, asked: [5], runner: 5 });
    expect(read).toEqual([1, 2]);
  });

  it("a list that fills every page a tick reads is not whole: absence is not judged, nothing is asked", async () => {
    const read: number[] = [];
    const full = Array.from({ length: 20 }, (_, i) => others(1000 + 50 * i, 50));
    expect(await waitingOnRunner(full, () => false, read)).toEqual({ forgotten: 0, asked: [], runner: 5 });
    expect(read).toHaveLength(20);
  });
});
