// A completion against the real nats-server: the call that completes an assignment frees its slot
// and says whether anyone waits for it; a repeated completion (the runner's own call beside
// Gitea's completed webhook) frees a slot that a failed first release left behind, without reading
// any count; and two at once in one isolate (the gateway) cost NATS the work of one.
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { completeAssignmentRun, RunnerMismatch } from "../../src/domain/operations.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

/**
 * A claimed assignment (its runner 7) holding the one slot, and a dispatcher whose stores log the
 * record writes and releases into `calls`; `failFirstRelease`: the first release throws.
 */
async function claimedHoldingTheSlot(failFirstRelease = false) {
  const config = await provisionEnv(testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 1 }));
  const calls: string[] = [];
  let fail = failFirstRelease;
  const counting = (state: State): State => ({
    ...state,
    records: {
      ...state.records,
      async update(id, change) {
        calls.push("update");
        return state.records.update(id, change);
      },
    },
    admission: {
      ...state.admission,
      async release(place, ...ids) {
        calls.push("release");
        if (fail) {
          fail = false;
          throw new Error("NATS went away");
        }
        return state.admission.release(place, ...ids);
      },
      async releaseAgain(place, ...ids) {
        calls.push("releaseAgain");
        return state.admission.releaseAgain(place, ...ids);
      },
    },
  });
  const d = createDispatcher({ config, sink: silent, decorateState: counting });
  const id = `done-${Math.random().toString(36).slice(2, 8)}`;
  await createDispatcher({ config, sink: silent }).withState(async ({ records, admission }) => {
    await records.offer(assignment(id));
    const at = new Date().toISOString();
    await records.update(id, (r) => written({ ...r, state: "claimed", claimedAt: at, runner: { id: 7, name: `gdr-${id}`, registeredAt: at, sealed: "x" } }));
    expect([...(await admission.acquireMany("pod", [id])).admitted]).toEqual([id]);
  });
  const holders = () => d.withState(({ admission }) => admission.holders("pod"));
  return { d, id, calls, holders };
}

describe("completing an assignment", () => {
  it("a repeated completion frees the slot a failed first release left behind", async () => {
    const { d, id, calls, holders } = await claimedHoldingTheSlot(true);
    await expect(completeAssignmentRun(d, id)).rejects.toThrow("NATS went away");
    expect(await holders()).toEqual([id]);
    const again = await completeAssignmentRun(d, id);
    expect(again).toMatchObject({ state: "completed", changed: false, contended: false });
    expect(calls).toEqual(["update", "release", "update", "releaseAgain"]);
    expect(await holders()).toEqual([]);
  });

  it("the call that completes it asks whether anyone waits (a full backend: yes)", async () => {
    const { d, id } = await claimedHoldingTheSlot();
    expect(await completeAssignmentRun(d, id)).toMatchObject({ changed: true, contended: true });
    expect(await completeAssignmentRun(d, id)).toMatchObject({ changed: false, contended: false });
  });

  describe("two at once in one isolate (the runner's own and Gitea's, in the gateway)", () => {
    it("the second asks NATS nothing: one write, one release; one of them completed it", async () => {
      const { d, id, calls, holders } = await claimedHoldingTheSlot();
      const [a, b] = await Promise.all([completeAssignmentRun(d, id), completeAssignmentRun(d, id, { runnerId: 7 })]);
      expect([a.changed, b.changed]).toEqual([true, false]);
      expect(b).toMatchObject({ state: "completed", contended: false });
      expect(calls).toEqual(["update", "release"]);
      expect(await holders()).toEqual([]);
    });

    it("near miss: a second that names another runner is refused as before", async () => {
      const { d, id } = await claimedHoldingTheSlot();
      const [a, b] = await Promise.allSettled([completeAssignmentRun(d, id), completeAssignmentRun(d, id, { runnerId: 8 })]);
      expect(a.status).toBe("fulfilled");
      expect(b.status === "rejected" && b.reason).toBeInstanceOf(RunnerMismatch);
    });

    it("near miss: an assignment ended otherwise (cancelled) is refused to both", async () => {
      const { d, id } = await claimedHoldingTheSlot();
      await d.withState(({ records }) =>
        records.update(id, (r) => written({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason: "cancelled" })),
      );
      const both = await Promise.allSettled([completeAssignmentRun(d, id), completeAssignmentRun(d, id)]);
      expect(both.map((x) => (x.status === "rejected" ? (x.reason as Error).message : "completed"))).toEqual([
        `assignment ${id} is terminated and cannot be completed`,
        `assignment ${id} is terminated and cannot be completed`,
      ]);
    });

    it("a first that failed to release leaves the second its own: the slot is freed", async () => {
      const { d, id, calls, holders } = await claimedHoldingTheSlot(true);
      const [a, b] = await Promise.allSettled([completeAssignmentRun(d, id), completeAssignmentRun(d, id)]);
      expect(a.status).toBe("rejected");
      expect(b.status === "fulfilled" && b.value).toMatchObject({ state: "completed", changed: false });
      expect(calls).toEqual(["update", "release", "update", "releaseAgain"]);
      expect(await holders()).toEqual([]);
    });
  });
});
