// A completion's release against the real nats-server: the call that completes an assignment
// frees its slot and says whether anyone waits for it; a repeated completion (the runner's own
// call beside Gitea's completed webhook) frees a slot that a failed first release left behind,
// without reading any count.
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { completeAssignmentRun } from "../../src/domain/operations.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

describe("completing an assignment", () => {
  it("a repeated completion frees the slot a failed first release left behind", async () => {
    const config = await provisionEnv(testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 1 }));
    const calls: string[] = [];
    let failFirst = true;
    const counting = (state: State): State => ({
      ...state,
      admission: {
        ...state.admission,
        async release(place, ...ids) {
          calls.push("release");
          if (failFirst) {
            failFirst = false;
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
    const id = "done-1";
    await d.withState(async ({ records, admission }) => {
      await records.offer(assignment(id));
      await records.update(id, (r) => written({ ...r, state: "claimed", claimedAt: new Date().toISOString() }));
      expect([...(await admission.acquireMany("pod", [id])).admitted]).toEqual([id]);
    });
    await expect(completeAssignmentRun(d, id)).rejects.toThrow("NATS went away");
    expect(await d.withState(({ admission }) => admission.holders("pod"))).toEqual([id]);
    const again = await completeAssignmentRun(d, id);
    expect(again).toMatchObject({ state: "completed", changed: false, contended: false });
    expect(calls).toEqual(["release", "releaseAgain"]);
    expect(await d.withState(({ admission }) => admission.holders("pod"))).toEqual([]);
  });

  it("the call that completes it asks whether anyone waits (a full backend: yes)", async () => {
    const config = await provisionEnv(testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 1 }));
    const d = createDispatcher({ config, sink: silent });
    const id = "done-2";
    await d.withState(async ({ records, admission }) => {
      await records.offer(assignment(id));
      await records.update(id, (r) => written({ ...r, state: "claimed", claimedAt: new Date().toISOString() }));
      await admission.acquireMany("pod", [id]);
    });
    expect(await completeAssignmentRun(d, id)).toMatchObject({ changed: true, contended: true });
    expect(await completeAssignmentRun(d, id)).toMatchObject({ changed: false, contended: false });
  });
});
