// The tick's rerun step (domain/reruns.ts) over in-memory fakes of its narrow dependencies: the
// rerun list with compare-and-set revisions, and a forge whose run finishes and whose rerun bumps
// the run's attempt. A tick cut short at any call, two ticks at once, and a forge without the
// endpoint: the job is asked for at most once, and only once its run has finished.
import { describe, expect, it } from "vitest";
import { askReruns } from "../../src/domain/reruns.ts";
import { rerunEntryOf } from "../../src/domain/interrupt.ts";
import type { JobReruns } from "../../src/domain/forge.ts";
import type { RerunEntry, RerunList } from "../../src/state/reruns.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";

class Killed extends Error {}

function memoryList(): RerunList & { entries: Map<string, { value: RerunEntry; revision: number }> } {
  const entries = new Map<string, { value: RerunEntry; revision: number }>();
  let rev = 0;
  return {
    entries,
    async add(e) {
      if (!entries.has(e.id)) entries.set(e.id, { value: e, revision: ++rev });
      return entries.get(e.id)!.value;
    },
    get: async (id) => entries.get(id) ?? null,
    list: async () => [...entries.values()],
    async move(next, revision) {
      const cur = entries.get(next.id);
      if (!cur || cur.revision !== revision) return null;
      entries.set(next.id, { value: next, revision: ++rev });
      return rev;
    },
    count: async () => undefined,
    counts: async () => new Map(),
  };
}

/** A forge whose run 7 is on attempt 1 until a rerun; `cut` throws (a kill) before or after a call. */
function forge(opts: { done?: boolean; absent?: boolean; refuse?: number } = {}) {
  const run = { done: opts.done ?? true, attempt: 1, asked: 0 };
  const cut: { at?: "before-rerun" | "after-rerun" | "run" } = {};
  const api: JobReruns = {
    async run() {
      if (cut.at === "run") throw new Killed();
      return { done: run.done, attempt: run.attempt };
    },
    async rerun() {
      if (cut.at === "before-rerun") throw new Killed();
      if (opts.absent) return "absent";
      if (opts.refuse) throw Object.assign(new Error("refused"), { status: opts.refuse });
      run.asked++;
      run.attempt++;
      run.done = false;
      if (cut.at === "after-rerun") throw new Killed();
      return "asked";
    },
  };
  return { run, cut, api };
}

const entry = (over: Partial<RerunEntry> = {}): RerunEntry => ({
  id: "gitea-42-1",
  repository: "acme/widgets",
  run: 7,
  job: 42,
  attempt: 1,
  since: "2026-12-06T00:00:00.000Z",
  state: "waiting",
  ...over,
});

function deps(list: RerunList, reruns: JobReruns | undefined) {
  const events: string[] = [];
  return {
    events,
    d: {
      now: () => Date.parse("2026-12-06T00:10:00Z"),
      sink: { event: (e: { event: string }) => events.push(e.event), error: () => undefined, summary: () => undefined },
      withState: <T>(fn: (s: { reruns: RerunList }) => Promise<T>) => fn({ reruns: list }),
      withFreshState: () => Promise.reject(new Error("unused")),
      forge: reruns ? ({ reruns } as never) : undefined,
    } as never,
  };
}

describe("the rerun step", () => {
  it("asks nothing while the run has not finished; asks once it has, and never again", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge({ done: false });
    const { d, events } = deps(list, f.api);
    expect((await askReruns(d)).waiting).toBe(1);
    expect(f.run.asked).toBe(0);
    f.run.done = true;
    expect((await askReruns(d)).asked).toBe(1);
    // The rerun ran and finished again: the entry is asked, so no tick asks a second time.
    f.run.done = true;
    for (let i = 0; i < 3; i++) await askReruns(d);
    expect([f.run.asked, list.entries.get("gitea-42-1")!.value.state, events]).toEqual([1, "asked", ["rerun_asked"]]);
  });

  it("a tick killed right after the forge took the rerun: the next finds the later attempt and asks no second time", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge();
    const { d } = deps(list, f.api);
    f.cut.at = "after-rerun";
    await askReruns(d);
    expect(list.entries.get("gitea-42-1")!.value.state).toBe("waiting");
    f.cut.at = undefined;
    // The rerun finished meanwhile: same status as before the first ask, but a later attempt.
    f.run.done = true;
    await askReruns(d);
    expect([f.run.asked, list.entries.get("gitea-42-1")!.value.state]).toEqual([1, "asked"]);
  });

  it("a tick killed before its request went out: the next asks (once)", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge();
    const { d } = deps(list, f.api);
    f.cut.at = "before-rerun";
    await askReruns(d);
    f.cut.at = undefined;
    await askReruns(d);
    await askReruns(d);
    expect([f.run.asked, list.entries.get("gitea-42-1")!.value.state]).toEqual([1, "asked"]);
  });

  it("two ticks at once: one asks", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge();
    const { d } = deps(list, f.api);
    await Promise.all([askReruns(d), askReruns(d), askReruns(d)]);
    expect(f.run.asked).toBe(1);
  });

  it("no endpoint (Gitea 1.25), no forge API, or a refusal: by hand, said once", async () => {
    for (const [f, state] of [
      [forge({ absent: true }).api, "by_hand"],
      [undefined, "by_hand"],
      [forge({ refuse: 403 }).api, "refused"],
    ] as const) {
      const list = memoryList();
      await list.add(entry());
      const { d, events } = deps(list, f);
      await askReruns(d);
      await askReruns(d);
      expect([list.entries.get("gitea-42-1")!.value.state, events.length]).toEqual([state, 1]);
    }
  });

  it("a 5xx is tried again at the next tick", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge({ refuse: 503 });
    const { d } = deps(list, f.api);
    await askReruns(d);
    expect(list.entries.get("gitea-42-1")!.value.state).toBe("waiting");
  });
});

describe("rerunEntryOf", () => {
  const record = (attempt: number) =>
    ({
      id: `gitea-42-${attempt}`,
      job: { repository: "acme/widgets", id: 42, run: 7, attempt },
      placement: { pool: "spot", backend: "vm" },
    }) as AssignmentRecord;
  it("waits while the run's attempt is within MAX_RERUNS, else by hand; none for a runner without a job", () => {
    expect(rerunEntryOf(record(1), "t", true, 1)?.state).toBe("waiting");
    expect(rerunEntryOf(record(2), "t", true, 1)?.state).toBe("by_hand");
    expect(rerunEntryOf(record(1), "t", true, 0)?.state).toBe("by_hand");
    expect(rerunEntryOf(record(1), "t", false, 1)?.state).toBe("by_hand");
    expect(rerunEntryOf({ id: "warm-x" } as AssignmentRecord, "t", true, 1)).toBeUndefined();
  });
});
