// One assignment, one Gitea registration, even when the record write that stores it fails (the
// records bucket electing a leader: reads answer, writes do not). Against the real nats-server,
// with the write failures injected into the record store.
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { encodeAssignment } from "../../src/model/assignment.ts";
import { loadConfig, type Config } from "../../src/app/config.ts";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { assignmentSubject } from "../../src/nats/names.ts";
import { NatsUnavailable, withNats } from "../../src/nats/connection.ts";
import { assignment, giteaTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

/** Record writes fail with a NATS error while `failing()` holds; reads keep working. */
const failingWrites =
  (failing: () => boolean) =>
  (state: State): State => {
    const refuse = () => Promise.reject(new NatsUnavailable("records bucket: no leader"));
    return {
      ...state,
      records: {
        ...state.records,
        update: (id, change) => (failing() ? refuse() : state.records.update(id, change)),
        updateFrom: (known, change) => (failing() ? refuse() : state.records.updateFrom(known, change)),
      },
    };
  };

async function setup(): Promise<{ config: Config; id: string }> {
  const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", { RETRY_DELAY_MS: 30 });
  const config = await provisionEnv(env);
  const id = "gitea-77-1";
  await withNats(config, (h) => h.js.publish(assignmentSubject(config, "pod"), encodeAssignment(assignment(id)), { msgID: id }));
  // Replicated as far as the dispatcher knows (one server cannot be): it reads from the leader
  // before registering, which on one server is the same copy.
  return { config: loadConfig({ ...env, JETSTREAM_REPLICAS: "3" }), id };
}

describe("a registration whose record write fails", () => {
  it("is stored once the writes come back within the retry window: one registration", async () => {
    const { config, id } = await setup();
    const gitea = stubGitea();
    const failUntil = Date.now() + 1_500;
    const d = createDispatcher({ config, gitea, sink: silent, decorateState: failingWrites(() => Date.now() < failUntil) });
    await d.reconcile("test", 10_000);
    expect(gitea.registrations).toBe(1);
    const record = await createDispatcher({ config }).withState(({ records }) => records.get(id));
    expect(record?.runner?.id).toBe(1);
    await new Promise((r) => setTimeout(r, 50));
    await createDispatcher({ config, gitea, sink: silent }).reconcile("test", 5_000);
    expect(gitea.registrations).toBe(1);
  });

  it("keeps its reservation when the writes stay down, so the next pass does not register again", { timeout: 60_000 }, async () => {
    const { config, id } = await setup();
    const gitea = stubGitea();
    let down = true;
    const d = createDispatcher({ config, gitea, sink: silent, decorateState: failingWrites(() => down) });
    const [summary] = await d.reconcile("test", 25_000);
    expect(summary).toMatchObject({ fetched: 1, errors: 1 });
    expect(gitea.registrations).toBe(1);
    down = false;
    const registering = await createDispatcher({ config }).withState(({ admission }) => admission.registering("pod"));
    expect(registering).toEqual([id]);
    await new Promise((r) => setTimeout(r, 50));
    await createDispatcher({ config, gitea, sink: silent }).reconcile("test", 5_000);
    expect(gitea.registrations).toBe(1);
  });

  it("is not made again on a lagging replica's read: registering asks the leader first", async () => {
    const { config, id } = await setup();
    const gitea = stubGitea();
    await createDispatcher({ config, gitea, sink: silent }).reconcile("test", 5_000);
    expect(gitea.registrations).toBe(1);
    // The reservation's lease is over, and a replica that lags answers the batch read with the
    // record as it was before the runner was stored.
    await createDispatcher({ config }).withState(({ admission }) => admission.endRegistrations("pod", [id]));
    const lagging = (state: State): State => ({
      ...state,
      records: {
        ...state.records,
        getMany: async (ids) => {
          const fresh = await state.records.getMany(ids);
          return new Map([...fresh].map(([k, v]) => [k, { ...v, value: written({ ...v.value, runner: undefined, state: "backend_pending" }) }]));
        },
      },
    });
    await new Promise((r) => setTimeout(r, 50));
    await createDispatcher({ config, gitea, sink: silent, decorateState: lagging }).reconcile("test", 5_000);
    expect(gitea.registrations).toBe(1);
    expect((await createDispatcher({ config }).withState(({ records }) => records.get(id)))?.runner?.id).toBe(1);
  });
});
