// Which passes look for turns to give at their end (fair share: the wait set's repositories, or
// the slot holders first where the pass put a job in the wait set), counted on the real
// nats-server behind the counting proxy: an eager pass for a new job gives turns only where its
// own work may have made one. Near misses, each reads them: a pass whose job went into the wait
// set, a pass whose backend call failed (its slot given back), a round of a coalesced pass (no
// `untilNew`: a release's pass asked for meanwhile), and a pass not started for new jobs.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import type { ReconcileOptions } from "../../src/domain/context.ts";
import { giteaTestEnv, provisionEnv, uniqueName } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";
import { createWaitingSeen, type WaitingSeen } from "../../src/state/waiting-seen.ts";

const proxy = inject("natsProxyUrl");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
let job = 80_000;

async function setUp(capacity: number, mode: Record<string, number> = {}, waitingSeen: WaitingSeen = createWaitingSeen()) {
  const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { CAPACITY_POD: capacity, RETRY_DELAY_MS: 30, FAIR_SHARE: "on" });
  await provisionEnv(env);
  await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify(mode) });
  const tag = uniqueName("ws");
  const d = createDispatcher({
    config: loadConfig({ ...env, NATS_URL: `${proxy}/${tag}` }),
    gitea: stubGitea(),
    sink: quiet,
    shareConnection: true,
    waitingSeen,
  });
  const waitSetReads = async (since: number) => {
    const log = (await (await fetch(`${proxy.replace("ws://", "http://")}/_log/${encodeURIComponent(tag)}`)).json()) as [number, string][];
    const read = log.filter(
      ([at, s]) => at >= since && ((s.startsWith("$JS.API.DIRECT.GET.") && s.includes("_waiting")) || s.startsWith("$JS.API.STREAM.INFO.")),
    );
    return read.map(([, s]) => (s.startsWith("$JS.API.STREAM.INFO.") ? "slots" : s.endsWith(".>") ? "any" : "batch"));
  };
  const pulls = async (since: number) => {
    const log = (await (await fetch(`${proxy.replace("ws://", "http://")}/_log/${encodeURIComponent(tag)}`)).json()) as [number, string][];
    return log.filter(([at, s]) => at >= since && s.startsWith("$JS.API.CONSUMER.MSG.NEXT.")).length;
  };
  /** A new job, and a pass for it: what the pass read of the wait set. */
  const pass = async (trigger: string, opts: ReconcileOptions) => {
    const id = `ws-${++job}`;
    await publishAssignment(d, { version: 1, id, backend: "pod", labels: ["ubuntu-latest"], job: { id: job, runId: 1, attempt: 1, repository: "acme/app" } });
    const since = Date.now();
    await d.reconcile(trigger, 5_000, { only: ["pod"], ...opts });
    return { id, reads: await waitSetReads(since) };
  };
  return { d, pass: async (trigger: string, opts: ReconcileOptions) => (await pass(trigger, opts)).reads, passFor: pass, waitSetReads, pulls };
}

describe("the wait set's repositories read at a pass's end (fair share)", () => {
  it("an eager pass whose new job took a free slot reads only whether anybody waits, alongside its pull", async () => {
    const { d, pass } = await setUp(5);
    try {
      expect(await pass("webhook", { eager: true })).toEqual(["any"]);
    } finally {
      await d.close();
    }
  });

  it("near miss: an eager pass whose new job went into the wait set reads them", async () => {
    const { d, pass } = await setUp(1);
    try {
      await d.withState(({ admission }) => admission.acquire("pod", "holder"));
      // Somebody waits now (its own job): the slot holders first, and the backend is full.
      expect(await pass("webhook", { eager: true })).toEqual(["any", "slots"]);
    } finally {
      await d.close();
    }
  });

  it("near miss: an eager pass whose backend call failed (the slot given back) reads them", async () => {
    const { d, pass } = await setUp(5, { failFirst: 1 });
    try {
      // Its release counts the slots alongside its purge, and asks whether anybody waits (the backend was not full).
      expect(await pass("webhook", { eager: true })).toEqual(["any", "slots", "any", "batch"]);
    } finally {
      await d.close();
    }
  });

  it("a pass whose look saw everybody waiting and gave each a turn looks no more, though slots are left (its look was whole: a look that may have missed repositories is `give-turn`'s near miss); nor does one whose turns filled the backend", async () => {
    const { d, pass, waitSetReads, pulls } = await setUp(3);
    try {
      const hold = (...ids: string[]) => d.withState(({ admission }) => Promise.all(ids.map((id) => admission.acquire("pod", id))));
      const free = (...ids: string[]) => d.withState(({ admission }) => admission.release("pod", ...ids));
      // The proxy stamps each operation to the millisecond: a step's last request can share the
      // millisecond a look starts in, so the look starts on the next one.
      const since = async () => {
        await new Promise((r) => setTimeout(r, 5));
        return Date.now();
      };
      await hold("holder-1", "holder-2", "holder-3");
      // A job waits (the backend is full); two slots are freed, with no pass of their own.
      await pass("webhook", { eager: true });
      await free("holder-1", "holder-2");
      // A pass with no new job: one glance, which held every job waiting, the holders, the turn
      // (its runner asked for by the pass), and a slot is left: nobody else was waiting, so no
      // second look (it glanced again here before: a request that found nobody).
      let at = await since();
      await d.reconcile("release", 5_000, { only: ["pod"] });
      expect(await waitSetReads(at)).toEqual(["batch", "slots"]);
      expect(await d.withState(({ admission }) => admission.holders("pod"))).toHaveLength(2);
      // One pull, the first round's: the turn's runner was asked for by the pass, nothing to pull.
      expect(await pulls(at)).toBe(1);
      // Near miss: the turn takes the last slot. A job waits again, one slot is freed: no second look.
      await hold("holder-1");
      await pass("webhook", { eager: true });
      await free("holder-1");
      at = await since();
      await d.reconcile("release", 5_000, { only: ["pod"] });
      expect(await waitSetReads(at)).toEqual(["batch", "slots"]);
    } finally {
      await d.close();
    }
  });

  it("a yes this isolate saw answers an eager pass; a stale one (the wait set emptied elsewhere) sends its job in, and that pass gives it the free slot", async () => {
    const seen = createWaitingSeen();
    seen.saw("pod", Date.now());
    const { d, passFor } = await setUp(1, {}, seen);
    try {
      const { id, reads } = await passFor("webhook", { eager: true });
      // No "any": the holders first (its job went into the wait set), then its turn, given at once,
      // which fills the backend: no second look.
      expect(reads).toEqual(["slots", "batch"]);
      expect(await d.withState(({ admission }) => admission.holders("pod"))).toEqual([id]);
      expect(await d.withState(({ waiting }) => waiting.counts("pod"))).toEqual(new Map());
    } finally {
      await d.close();
    }
  });

  it("an eager pass that starts while another here asks whether anybody waits does not ask alongside its pull: with no new job it asks nothing; near misses: one that brings a new job asks, and one alone asks alongside", async () => {
    const seen = createWaitingSeen();
    const { d, passFor, waitSetReads } = await setUp(5, {}, seen);
    try {
      // Another pass's question, under way in this isolate.
      seen.asked("pod", 1);
      let at = Date.now();
      await d.reconcile("webhook", 5_000, { only: ["pod"], eager: true });
      expect(await waitSetReads(at)).toEqual([]);
      // Near miss: its pull brings a new job, which asks (that other pass's "no" would not answer it).
      expect((await passFor("webhook", { eager: true })).reads).toEqual(["any"]);
      // Near miss: the question answered, a pass asks alongside its pull again, even with nothing to pull.
      seen.asked("pod", -1);
      at = Date.now();
      await d.reconcile("webhook", 5_000, { only: ["pod"], eager: true });
      expect(await waitSetReads(at)).toEqual(["any"]);
    } finally {
      await d.close();
    }
  });

  it.each([
    ["a coalesced round of a webhook's pass", "webhook", {}],
    ["a pass not started for new jobs", "release", { eager: true }],
  ] as const)("near miss: %s reads them", async (_name, trigger, opts) => {
    const { d, pass } = await setUp(5);
    try {
      expect(await pass(trigger, opts)).toContain("batch");
    } finally {
      await d.close();
    }
  });
});
