// The tick's rerun step (domain/reruns.ts) over in-memory fakes of its narrow dependencies (the
// rerun list with compare-and-set revisions, a forge that looks and asks), then the same step with
// the Gitea client against the fake Gitea playing 1.25, 1.26 and 1.27 (scripts/fake-gitea-releases.mjs):
// a job is asked for at most once, only once its run has finished, with the id its release wants,
// and a rerun counts per job.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { askReruns } from "../../src/domain/reruns.ts";
import { rerunEntryOf } from "../../src/domain/interrupt.ts";
import type { JobReruns, RerunAsked } from "../../src/domain/forge.ts";
import { createRerunList, type RerunEntry, type RerunList } from "../../src/state/reruns.ts";
import { closeNats, openNats } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { bindBucket } from "../../src/state/kv.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { askedAnswer, giteaReruns, lookAt } from "../../src/forge/gitea/reruns.ts";
import { releaseOf } from "../../src/forge/gitea/versions.ts";
import { createGiteaClient } from "../../src/forge/gitea/client.ts";
import { giteaRelease } from "../../src/forge/gitea/release.ts";
import type { GiteaConfig } from "../../src/forge/gitea/config.ts";
import { FAKE_GITEA, startFakeGitea } from "../../scripts/fake-gitea.mjs";

class Killed extends Error {}

function memoryList(): RerunList & { entries: Map<string, { value: RerunEntry; revision: number }>; notes: Map<string, { of: string; reruns: number }> } {
  const entries = new Map<string, { value: RerunEntry; revision: number }>();
  const notes = new Map<string, { of: string; reruns: number }>();
  let rev = 0;
  return {
    entries,
    notes,
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
    noteRerun: async (next, of, reruns) => void notes.set(next, { of, reruns }),
    rerunOf: async (id) => notes.get(id) ?? null,
  };
}

/** A forge whose job 42 may be asked for once its run is done; `cut` throws (a kill) at a call. */
function forge(opts: { done?: boolean; answer?: RerunAsked } = {}) {
  const run = { done: opts.done ?? true, asked: 0, rerun: false };
  const cut: { at?: "before-ask" | "after-ask" | "look" } = {};
  const api: JobReruns = {
    async look() {
      if (cut.at === "look") throw new Killed();
      if (run.rerun) return { step: "rerun", next: "gitea-42-2" };
      return run.done ? { step: "ask", job: 42 } : { step: "wait" };
    },
    async ask() {
      if (cut.at === "before-ask") throw new Killed();
      if (opts.answer) return opts.answer;
      run.asked++;
      run.rerun = true;
      if (cut.at === "after-ask") throw new Killed();
      return { step: "rerun", next: "gitea-42-2" };
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
    for (let i = 0; i < 3; i++) await askReruns(d);
    expect([f.run.asked, list.entries.get("gitea-42-1")!.value, events]).toEqual([
      1,
      expect.objectContaining({ state: "asked", next: "gitea-42-2" }),
      ["rerun_asked"],
    ]);
    // The rerun's execution is noted, as its job's first rerun.
    expect(list.notes.get("gitea-42-2")).toEqual({ of: "gitea-42-1", reruns: 1 });
  });

  it("a tick killed right after the forge took the rerun: the next finds it rerun and asks no second time", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge();
    const { d } = deps(list, f.api);
    f.cut.at = "after-ask";
    await askReruns(d);
    expect([list.entries.get("gitea-42-1")!.value.state, list.notes.size]).toEqual(["waiting", 0]);
    f.cut.at = undefined;
    await askReruns(d);
    expect([f.run.asked, list.entries.get("gitea-42-1")!.value.state, list.notes.has("gitea-42-2")]).toEqual([1, "asked", true]);
  });

  it("a tick killed before its request went out, or at its look: the next asks (once)", async () => {
    for (const at of ["before-ask", "look"] as const) {
      const list = memoryList();
      await list.add(entry());
      const f = forge();
      const { d } = deps(list, f.api);
      f.cut.at = at;
      await askReruns(d);
      f.cut.at = undefined;
      await askReruns(d);
      await askReruns(d);
      expect([f.run.asked, list.entries.get("gitea-42-1")!.value.state]).toEqual([1, "asked"]);
    }
  });

  it("two ticks at once: one asks", async () => {
    const list = memoryList();
    await list.add(entry());
    const f = forge();
    const { d } = deps(list, f.api);
    await Promise.all([askReruns(d), askReruns(d), askReruns(d)]);
    expect(f.run.asked).toBe(1);
  });

  it("no rerun API, no forge API, or a refusal: said once; a race (wait) is looked at again", async () => {
    for (const [f, state, said] of [
      [forge({ answer: { step: "by_hand", reason: "no API" } }).api, "by_hand", 1],
      [undefined, "by_hand", 1],
      [forge({ answer: { step: "refused", reason: "403" } }).api, "refused", 1],
      [forge({ answer: { step: "wait", reason: "409" } }).api, "waiting", 0],
    ] as const) {
      const list = memoryList();
      await list.add(entry());
      const { d, events } = deps(list, f);
      await askReruns(d);
      await askReruns(d);
      expect([list.entries.get("gitea-42-1")!.value.state, events.length]).toEqual([state, said]);
    }
  });

  it("a 5xx is tried again at the next tick", async () => {
    const list = memoryList();
    await list.add(entry());
    const api: JobReruns = { look: async () => ({ step: "ask", job: 42 }), ask: () => Promise.reject(Object.assign(new Error("503"), { status: 503 })) };
    const { d } = deps(list, api);
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
  it("waits while the dispatcher reran the job fewer than MAX_RERUNS times, else by hand; none for a runner without a job", () => {
    expect(rerunEntryOf(record(1), "t", true, 1)?.state).toBe("waiting");
    // A run attempt of 2 (1.27: another job of the run was rerun) is no rerun of this job.
    expect(rerunEntryOf(record(2), "t", true, 1, 0)?.state).toBe("waiting");
    expect(rerunEntryOf(record(2), "t", true, 1, 1)).toMatchObject({ state: "by_hand", reruns: 1 });
    expect(rerunEntryOf(record(3), "t", true, 2, 1)?.state).toBe("waiting");
    expect(rerunEntryOf(record(1), "t", true, 0)?.state).toBe("by_hand");
    expect(rerunEntryOf(record(1), "t", false, 1)?.state).toBe("by_hand");
    expect(rerunEntryOf({ id: "warm-x" } as AssignmentRecord, "t", true, 1)).toBeUndefined();
  });
});

describe("what Gitea's answer to a rerun means, release by release", () => {
  const lost = { repository: "acme/widgets", run: 7, job: 42, execution: 1 };
  const job = (id: number, run_attempt: number) => ({ id, run_id: 7, run_attempt, status: "queued" });
  it.each([
    ["1.26.2", { asked: job(42, 1) }, { step: "rerun", next: "gitea-42-2" }],
    ["1.27.0", { asked: job(99, 2) }, { step: "rerun", next: "gitea-99-2" }],
    ["1.27.0", { refused: 404 }, { step: "wait", reason: "Gitea answered 404" }],
    ["1.27.0", { refused: 409 }, { step: "wait", reason: "Gitea answered 409" }],
    ["1.27.0", { refused: 400 }, { step: "refused", reason: expect.stringContaining("400") }],
    ["1.26.2", { refused: 404 }, { step: "by_hand", reason: expect.stringContaining("no such job") }],
    ["1.26.2", { refused: 405 }, { step: "by_hand", reason: expect.stringContaining("no rerun API") }],
  ] as const)("Gitea %s: %j", (version, answer, want) => {
    expect(askedAnswer(releaseOf(version), lost, answer)).toEqual(want);
  });
});

describe("reruns against the fake Gitea, release by release", () => {
  let gitea: { url: string; close: () => Promise<void> };
  beforeAll(async () => {
    gitea = await startFakeGitea();
  });
  afterAll(() => gitea.close());
  let tenant = 0;

  async function scene(version: string, jobs = 2) {
    const url = `${gitea.url}/reruns-${++tenant}`;
    const ctl = async (what: string, body: unknown) => (await fetch(`${url}/_control/${what}`, { method: "POST", body: JSON.stringify(body) })).json();
    await ctl("version", { version });
    const queued = (await ctl(
      "queue",
      Array.from({ length: jobs }, (_, i) => ({ labels: ["ubuntu-latest"], run_id: 7, name: `job-${i}` })),
    )) as { jobs: number[] };
    // A runner takes each job (its pickup numbers it on 1.26), then Gitea fails the jobs whose runner went silent.
    const reg = await fetch(`${url}/api/actions/runner.v1.RunnerService/Register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "r", token: FAKE_GITEA.registrationToken, labels: ["ubuntu-latest"], ephemeral: false }),
    });
    const { runner } = (await reg.json()) as { runner: { uuid: string; token: string } };
    const take = async () => {
      const res = await fetch(`${url}/api/actions/runner.v1.RunnerService/FetchTask`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-runner-uuid": runner.uuid, "x-runner-token": runner.token },
        body: "{}",
      });
      return ((await res.json()) as { task?: { id: string } }).task;
    };
    // The runner's machine is gone: Gitea gives up on its task (the job fails) and the runner may take the next.
    const lose = (id: number) => ctl("fail-lost", { id });
    const cfg = { url, apiToken: FAKE_GITEA.apiToken, scope: { kind: "admin" } } as unknown as GiteaConfig;
    const client = createGiteaClient(cfg, 5_000);
    const events: string[] = [];
    const basics = { now: () => Date.now(), sink: { event: (e: { event: string }) => events.push(e.event), error: () => undefined, summary: () => undefined } };
    const reruns = giteaReruns(client, () => giteaRelease({ ...basics, config: { gitea: cfg } }, client));
    const list = memoryList();
    const made = deps(list, reruns);
    const d = made.d;
    const actions = async () =>
      (await (await fetch(`${url}/_control/actions`)).json()) as { jobs: { id: number; run_attempt: number; status: string; name: string }[]; reruns: number };
    const requests = async () => ((await (await fetch(`${url}/_control/state`)).json()) as { requests: { method: string; path: string }[] }).requests;
    /** The step with a forge whose ask is killed right after Gitea took it. */
    const killedAfterAsk = deps(list, {
      look: (lost) => reruns.look(lost),
      async ask(lost, id) {
        await reruns.ask(lost, id);
        throw new Killed();
      },
    }).d;
    return { ids: queued.jobs, take, lose, list, d, killedAfterAsk, actions, requests, ctl, events: made.events };
  }

  /** The entry of a job lost in `execution` whose runner took it (what interrupt.ts lists). */
  const lostEntry = (job: number, execution: number) => entry({ id: `gitea-${job}-${execution}`, job, attempt: execution });

  it("1.27: two lost jobs of one run are both rerun, each by its copy in the latest attempt, and their new executions are noted", async () => {
    const s = await scene("1.27.0");
    const [a, b] = s.ids as [number, number];
    await s.take();
    await s.lose(a);
    await s.take();
    await s.lose(b);
    await s.list.add(lostEntry(a, 1));
    await s.list.add(lostEntry(b, 1));
    // Gitea reruns nothing of a run that is not done: a's rerun first, b's once it finished.
    expect(await askReruns(s.d)).toMatchObject({ asked: 1, waiting: 1 });
    await s.take();
    const rerunOfA = (await s.actions()).jobs.find((j) => j.status === "in_progress")!;
    await s.lose(rerunOfA.id);
    expect(await askReruns(s.d)).toMatchObject({ asked: 1, waiting: 0 });
    const { jobs, reruns } = await s.actions();
    expect(reruns).toBe(2);
    // Attempt 2 reran a (b passed through), attempt 3 reran b (a's rerun passed through).
    const reran = jobs.filter((j) => (j.name === "job-0" && j.run_attempt === 2) || (j.name === "job-1" && j.run_attempt === 3));
    expect(reran.map((j) => j.status)).toEqual(["completed", "queued"]);
    const next = [...s.list.entries.values()].map((e) => e.value.next);
    const ids = reran;
    expect(next.sort()).toEqual(ids.map((j) => `gitea-${j.id}-${j.run_attempt}`).sort());
    for (const n of next) expect(s.list.notes.get(n!)?.reruns).toBe(1);
    // Asked with the copies' ids: the old ids are no longer in the latest attempt.
    const asked = (await s.requests())
      .filter((r) => r.method === "POST" && r.path.endsWith("/rerun"))
      .map((r) => Number(/jobs\/(\d+)\/rerun/.exec(r.path)![1]));
    expect(asked).toHaveLength(2);
    expect(asked).toContain(a);
    expect(asked).not.toContain(b);
  });

  it("1.27: a tick killed after Gitea took the rerun finds the copy rerun and asks no second time", async () => {
    const s = await scene("1.27.0", 1);
    const [a] = s.ids as [number];
    await s.take();
    await s.lose(a);
    await s.list.add(lostEntry(a, 1));
    await askReruns(s.killedAfterAsk);
    expect(s.list.entries.get(`gitea-${a}-1`)!.value.state).toBe("waiting");
    await askReruns(s.d);
    const { reruns, jobs } = await s.actions();
    const copy = jobs.find((j) => j.run_attempt === 2)!;
    expect([reruns, s.list.entries.get(`gitea-${a}-1`)!.value]).toEqual([1, expect.objectContaining({ state: "asked", next: `gitea-${copy.id}-2` })]);
  });

  it("1.26: the same job row runs again; the run's attempt says 0, the job says it took", async () => {
    const s = await scene("1.26.2", 1);
    const [a] = s.ids as [number];
    await s.take();
    await s.lose(a);
    // Taken once: the row's attempt is 1, the run GET says 0 (ToActionWorkflowRun never sets it).
    expect((await s.actions()).jobs[0]).toMatchObject({ id: a, run_attempt: 1, status: "completed" });
    await s.list.add(lostEntry(a, 1));
    await askReruns(s.killedAfterAsk);
    await askReruns(s.d);
    const { reruns, jobs } = await s.actions();
    expect([reruns, jobs.map((j) => [j.id, j.run_attempt, j.status]), s.list.entries.get(`gitea-${a}-1`)!.value]).toEqual([
      1,
      [[a, 1, "queued"]],
      expect.objectContaining({ state: "asked", next: `gitea-${a}-2` }),
    ]);
  });

  it.each(["1.26.2", "1.27.0"])(
    "%s: a lost job whose run a person (or a newer push) cancelled is settled, not rerun; the same run not cancelled is rerun",
    async (version) => {
      const s = await scene(version);
      const [a, b] = s.ids as [number, number];
      await s.take();
      await s.lose(a);
      // Gitea cancels the rest of the run: the run's conclusion is cancelled (AggregateJobStatus).
      await s.ctl("cancel", { id: b });
      await s.list.add(lostEntry(a, 1));
      expect(await askReruns(s.d)).toMatchObject({ settled: 1, asked: 0 });
      expect(s.list.entries.get(`gitea-${a}-1`)!.value).toMatchObject({ state: "settled", reason: expect.stringContaining("cancelled") });
      expect(s.events).toContain("rerun_settled");
      expect((await s.requests()).filter((r) => r.method === "POST" && r.path.endsWith("/rerun"))).toEqual([]);
      // Near miss: the other job failed with its runner too, nothing cancelled: rerun.
      const t = await scene(version);
      const [c, d] = t.ids as [number, number];
      await t.take();
      await t.lose(c);
      await t.take();
      await t.lose(d);
      await t.list.add(lostEntry(c, 1));
      expect(await askReruns(t.d)).toMatchObject({ asked: 1, settled: 0 });
    },
  );

  it("a lost job cancelled itself (its conclusion cancelled) is settled whatever its run says", () => {
    const lost = { repository: "acme/widgets", run: 7, job: 42, execution: 1 };
    const run = { id: 7, status: "completed", conclusion: "failure", run_attempt: 1 };
    const job = { id: 42, run_id: 7, status: "completed", conclusion: "cancelled" };
    expect(lookAt(releaseOf("1.27.0"), lost, { run, job })).toMatchObject({ step: "settled" });
    expect(lookAt(releaseOf("1.27.0"), lost, { run, job: { ...job, conclusion: "failure" } })).toEqual({ step: "ask", job: 42 });
    expect(lookAt(releaseOf("1.26.2"), lost, { run: { ...run, conclusion: "cancelled" }, job: { ...job, conclusion: "failure" } })).toMatchObject({
      step: "settled",
    });
  });

  it("1.25: by hand, naming the release, and Gitea is not asked", async () => {
    const s = await scene("1.25.5", 1);
    const [a] = s.ids as [number];
    await s.take();
    await s.lose(a);
    await s.list.add(lostEntry(a, 1));
    await askReruns(s.d);
    expect(s.list.entries.get(`gitea-${a}-1`)!.value).toMatchObject({ state: "by_hand", reason: expect.stringContaining("Gitea 1.25.5 has no rerun API") });
    expect((await s.requests()).filter((r) => r.path.includes("/runs/"))).toEqual([]);
  });
});

describe("the rerun list on NATS", () => {
  it("a move from a revision no longer current fails: of two ticks that read the same entry, one asks Gitea", async () => {
    const env = testEnv(inject("natsWsUrl"), inject("backendUrl"));
    const config = await provisionEnv(env);
    const handle = await openNats(config);
    try {
      const list = createRerunList(handle, await bindBucket(handle, recordsBucket(config)), recordsBucket(config));
      const e = { id: "gitea-5-1", repository: "acme/widgets", run: 2, job: 5, attempt: 1, since: "2026-12-07T00:00:00Z", state: "waiting" as const };
      await list.add(e);
      const read = (await list.get(e.id))!;
      // Both ticks read revision `read.revision`; the first mark lands, the second finds it moved.
      const first = await list.move({ ...e, askedAt: "2026-12-07T00:01:00Z" }, read.revision);
      expect(first).not.toBeNull();
      expect(await list.move({ ...e, askedAt: "2026-12-07T00:01:01Z" }, read.revision)).toBeNull();
      expect((await list.get(e.id))!.value.askedAt).toBe("2026-12-07T00:01:00Z");
      // From the current revision it moves on.
      expect(await list.move({ ...e, state: "asked" }, first!)).not.toBeNull();
    } finally {
      await closeNats(handle.nc);
    }
  });
});
