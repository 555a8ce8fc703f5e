// A job that ends while a pass provisions it: the pass read the record before the end, and finds
// out only when it stores the runner it registered. Against the real nats-server, with the end
// injected into the record store right after the pass's read (the workerd gitea test covers a
// cancel during the registration itself).
import { describe, expect, inject, it } from "vitest";
import { encodeAssignment } from "../../src/assignment.ts";
import { loadConfig } from "../../src/config.ts";
import { createDispatcher, type State } from "../../src/dispatcher.ts";
import { assignmentSubject } from "../../src/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { assignment, giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

const events: { event: string; assignment: string }[] = [];
const sink = { event: (e: { event: string; assignment: string }) => void events.push(e), summary: () => undefined, error: () => undefined };

/** The record is terminated just after the pass's batch read returns it, as a cancel landing then would. */
const endedAfterRead = (reason: string) => (state: State): State => ({
  ...state,
  records: {
    ...state.records,
    getMany: async (ids) => {
      const read = await state.records.getMany(ids);
      for (const id of ids) await state.records.update(id, (r) => ({ ...r, state: "terminated", terminatedAt: new Date().toISOString(), reason }));
      return read;
    },
  },
});

describe("a job that ends between a pass's read and its backend call", () => {
  it("gets no workload, and the slot the pass took after the end goes back", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { RETRY_DELAY_MS: 30, CAPACITY_POD: 1 });
    const config = await provisionEnv(env);
    const id = "gitea-4242-1";
    // As a webhook does it: the record first, then the message.
    await createDispatcher({ config }).withState(({ records }) => records.offer(assignment(id)));
    await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment(id)), { msgID: id }));
    const d = createDispatcher({ config: loadConfig(env), gitea: stubGitea(), sink, decorateState: endedAfterRead("cancelled") });
    const [summary] = await d.reconcile("test", 5_000);
    expect(summary).toMatchObject({ fetched: 1, termed: 1, errors: 0 });
    expect(events.filter((e) => e.assignment === id).map((e) => e.event)).toEqual(["received", "capacity_acquired", "runner_registered", "already_done"]);
    const backend = (await (await fetch(`${env.POD_BACKEND_URL}/_control/state`)).json()) as { runners: unknown[]; requests: { method: string }[] };
    expect(backend.requests.filter((r) => r.method === "PUT")).toEqual([]);
    // Nobody else released it: the cancel came before the pass took it.
    const after = await createDispatcher({ config }).withState(async ({ admission, records }) => ({ snapshot: await admission.snapshot("pod"), record: await records.get(id) }));
    expect(after.snapshot).toEqual({ holders: [], registering: [] });
    // The runner it registered is in the record, for the sweep to delete.
    expect(after.record).toMatchObject({ state: "terminated", reason: "cancelled", runner: { id: 1 } });
  });
});
