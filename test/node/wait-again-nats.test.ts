// A job that waits a second time, against the real nats-server and its duplicate window (fair
// share at capacity 1): its turn's backend call failed and gave the slot back, another job's turn
// took it, and its message came back to a full backend. It gets a new entry in the wait set, it
// is counted as waiting for capacity, and its turn comes when the slot frees. A turn out of its
// pass's budget gives its slot back, and the next pass gives the turn again.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type Dispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { claimAssignment, completeAssignmentRun } from "../../src/domain/operations.ts";
import { takeSnapshot } from "../../src/observe/snapshot.ts";
import { encodeAssignment } from "../../src/model/assignment.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
const BUDGET_MS = 15_000;

async function scene(now?: () => number, decorateState?: Parameters<typeof createDispatcher>[0]["decorateState"]) {
  const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 1_000, FAIR_SHARE: "on", CAPACITY_POD: 1 });
  await provisionEnv(env);
  const mode = (m: object) => fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: 1_000, ...m }) });
  await mode({});
  const d = createDispatcher({ config: loadConfig(env), sink: quiet, ...(now ? { now } : {}), ...(decorateState ? { decorateState } : {}) });
  return { env, d, mode };
}

const job = (id: string, n: number, repository: string) => ({ ...assignment(id), job: { id: n, runId: 1, attempt: 1, repository } });
const recordOf = (d: Dispatcher, id: string) => d.withState(({ records }) => records.get(id));
const waiting = async (d: Dispatcher) => (await d.withState(({ waiting }) => waiting.oldest("pod", 32))).map((h) => h.id);
const waitingForCapacity = async (d: Dispatcher) => (await takeSnapshot(d)).backends.find((b) => b.backend === "pod")!.waitingForCapacity;
const holders = (d: Dispatcher) => d.withState(({ admission }) => admission.holders("pod"));
const done = async (d: Dispatcher, id: string) => {
  await claimAssignment(d, id);
  await completeAssignmentRun(d, id);
};

describe("a job that waits a second time", () => {
  it("after its turn's backend call failed: a new entry, counted as waiting, and its turn when the slot frees", async () => {
    const { d, mode } = await scene();
    await publishAssignment(d, job("t1", 1, "a/one"));
    await publishAssignment(d, job("t2", 2, "b/two"));
    await publishAssignment(d, job("t3", 3, "c/three"));
    await d.reconcile("test", BUDGET_MS);
    expect(await waiting(d)).toEqual(["t2", "t3"]);
    expect(await waitingForCapacity(d)).toBe(2);
    // t2's turn: its runner's PUT fails (503), which gives the slot back; t2's entry is taken out.
    await mode({ failFirst: 1 });
    await done(d, "t1");
    await d.reconcile("release", BUDGET_MS);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "backend_pending", waits: 1 });
    // t3's turn takes the free slot before t2's message comes back (RETRY_DELAY_MS).
    await d.reconcile("test", BUDGET_MS);
    expect(await holders(d)).toEqual(["t3"]);
    await new Promise((r) => setTimeout(r, 1_300));
    await d.reconcile("test", BUDGET_MS);
    // Back to a full backend: t2 waits again, with a new entry (its first id is in the duplicate window).
    expect(await recordOf(d, "t2")).toMatchObject({ state: "capacity_wait", waits: 2 });
    expect(await waiting(d)).toEqual(["t2"]);
    expect(await waitingForCapacity(d)).toBe(1);
    await done(d, "t3");
    await d.reconcile("release", BUDGET_MS);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "backend_pending" });
    expect(await holders(d)).toEqual(["t2"]);
    expect(await waiting(d)).toEqual([]);
    expect(await waitingForCapacity(d)).toBe(0);
  });

  it("a turn out of its pass's budget gives its slot back; the next pass gives the turn again and asks", async () => {
    // A clock that jumps past the pass's deadline once t2's first turn has taken its slot.
    let skew = 0;
    let once = true;
    const { d } = await scene(
      () => Date.now() + skew,
      (state) => ({
        ...state,
        admission: {
          ...state.admission,
          placeMany: async (...args) => {
            const placed = await state.admission.placeMany(...args);
            if (placed.admitted.has("t2") && once) [skew, once] = [BUDGET_MS * 2, false];
            return placed;
          },
        },
      }),
    );
    await publishAssignment(d, job("t1", 1, "a/one"));
    await publishAssignment(d, job("t2", 2, "b/two"));
    await d.reconcile("test", BUDGET_MS);
    await done(d, "t1");
    await d.reconcile("release", BUDGET_MS);
    skew = 0;
    expect(await recordOf(d, "t2")).toMatchObject({ state: "capacity_wait" });
    expect(await holders(d)).toEqual([]);
    expect(await waiting(d)).toEqual(["t2"]);
    await d.reconcile("test", BUDGET_MS);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "backend_pending" });
    expect(await holders(d)).toEqual(["t2"]);
  });
});

describe("a turn given to an entry from before the hold (published again)", () => {
  it("that filled the backend is pulled and started in the same pass, not left for the next one", async () => {
    const { d } = await scene();
    await publishAssignment(d, job("t1", 1, "a/one"));
    await d.reconcile("test", BUDGET_MS);
    // t2 waits as it did before the hold: its message acked, its entry naming none.
    const t2 = job("t2", 2, "b/two");
    await d.withState(async ({ records, waiting }) => {
      await records.offer(t2);
      await records.update("t2", (r) => ({ ...r, state: "capacity_wait" }) as typeof r);
      const data = btoa(String.fromCharCode(...encodeAssignment(t2)));
      await waiting.add("pod", { id: "t2", owner: "b", repository: "b/two", data }, "legacy");
    });
    await done(d, "t1");
    const [pass] = await d.reconcile("release", BUDGET_MS);
    expect(pass).toMatchObject({ fetched: 1 });
    expect(await recordOf(d, "t2")).toMatchObject({ state: "backend_pending" });
    expect(await holders(d)).toEqual(["t2"]);
    expect(await waiting(d)).toEqual([]);
  });
});
