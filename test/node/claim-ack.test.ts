// A claim acks the message of the pass that asked for its runner (domain/operations.ts, with the
// delivery's ack subject the pass wrote into the record): no pass has to wait out the message's
// nak delay to ack it. Against the real nats-server, which finds the message by the stream
// sequence in the subject, whichever delivery named it. Near misses: the subject of a turn's
// republished message, not the first one's; a subject that is not an ack subject; an ack that fails.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type Dispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { claimAssignment, completeAssignmentRun } from "../../src/domain/operations.ts";
import { cancelAssignment } from "../../src/domain/cancel.ts";
import { applyEffects } from "../../src/reconcile/effects.ts";
import type { Prepared, ProcessDeps } from "../../src/reconcile/types.ts";
import type { DeliveredMessage } from "../../src/nats/pull.ts";
import type { Versioned } from "../../src/state/kv.ts";
import type { AssignmentRecord, Transition } from "../../src/state/records.ts";
import { parseAckSubject } from "../../src/nats/pull.ts";
import { streamState } from "../harness/nats.ts";
import { written } from "../harness/memory.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const events: { event: string; assignment: string }[] = [];
const sink = { event: (e: { event: string; assignment: string }) => void events.push(e), summary: () => undefined, error: () => undefined };
const PASS_BUDGET_MS = 15_000;

/** Capacity `capacity`; the backend answers "pending" (runners boot) unless `ready`. */
async function scene(overrides: Record<string, unknown>, ready = false) {
  const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 60_000, ...overrides });
  await provisionEnv(env);
  await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: ready ? 0 : 1_000 }) });
  const d = createDispatcher({ config: loadConfig(env), sink });
  return { env, d };
}

const job = (id: string, n: number, repository = "a/mono") => ({ ...assignment(id), job: { id: n, runId: 1, attempt: 1, repository } });
const recordOf = (d: Dispatcher, id: string) => d.withState(({ records }) => records.get(id));

describe.each(["off", "on"])("FAIR_SHARE=%s: a claim acks its runner's message", (fairShare) => {
  it("itself, while the message is out on its nak delay: nothing is left for a pass", async () => {
    const { env, d } = await scene({ FAIR_SHARE: fairShare });
    await publishAssignment(d, job("c1", 1));
    const [pass] = await d.reconcile("test", PASS_BUDGET_MS);
    expect(pass).toMatchObject({ fetched: 1, naked: 1 });
    const asked = await recordOf(d, "c1");
    expect(asked).toMatchObject({ state: "backend_pending" });
    expect(parseAckSubject(asked!.askedBy!).seq).toBe(1);
    expect(await streamState(env)).toMatchObject({ ackPending: 1 });

    const claimed = await claimAssignment(d, "c1");
    expect(claimed).toMatchObject({ state: "claimed", held: true, changed: true });
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
    expect(
      events
        .filter((e) => e.assignment === "c1")
        .slice(-3)
        .map((e) => e.event),
    ).toEqual(["claimed", "runner_claimed", "acked"]);
    // A repeated claim changes nothing and needs no pass either.
    expect(await claimAssignment(d, "c1")).toMatchObject({ held: true, changed: false });
  });
});

describe("a warm runner's claim", () => {
  it("tells the isolate's look at warm runners that one of its pool took a job; near miss: a job's runner's claim tells nothing", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 60_000 });
    await provisionEnv(env);
    const took: string[] = [];
    const d = createDispatcher({
      config: loadConfig(env),
      sink,
      decorateState: (state) => ({ ...state, warmLook: { ...state.warmLook, tookJob: (pool: string) => void took.push(pool) } }),
    });
    await publishAssignment(d, job("w1", 1));
    await publishAssignment(d, job("j1", 2));
    await d.reconcile("test", PASS_BUDGET_MS);
    const placement = { pool: "small", backend: "pod" } as const;
    await d.withState(({ records }) => records.update("w1", (r) => ({ ...r, warm: true, placement })));
    // A job's runner of the same pool.
    await d.withState(({ records }) => records.update("j1", (r) => ({ ...r, placement })));
    await claimAssignment(d, "j1");
    expect(took).toEqual([]);
    await claimAssignment(d, "w1");
    expect(took).toEqual(["small"]);
    // A repeated claim changed nothing: nothing more is told.
    await claimAssignment(d, "w1");
    expect(took).toEqual(["small"]);
  });
});

describe("a claim's ack", () => {
  it("names the delivery that asked for the runner, even after the message came again meanwhile", async () => {
    const { env, d } = await scene({ RETRY_DELAY_MS: 50 });
    await publishAssignment(d, job("c2", 2));
    await d.reconcile("test", PASS_BUDGET_MS);
    const first = (await recordOf(d, "c2"))!.askedBy!;
    // Delivered again while its runner boots: nothing of the record changes, the subject stays the first delivery's.
    await new Promise((r) => setTimeout(r, 150));
    const [again] = await d.reconcile("test", PASS_BUDGET_MS);
    expect(again).toMatchObject({ fetched: 1, naked: 1 });
    expect((await recordOf(d, "c2"))!.askedBy).toBe(first);
    expect(parseAckSubject(first).deliveryCount).toBe(1);

    expect(await claimAssignment(d, "c2")).toMatchObject({ held: true });
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
    await new Promise((r) => setTimeout(r, 150));
    const [after] = await d.reconcile("test", PASS_BUDGET_MS);
    expect(after).toMatchObject({ fetched: 0 });
  });

  it("with fair share, names the message its wait held: the turn asks for its runner from the pass, and nothing is published again", async () => {
    const { env, d } = await scene({ FAIR_SHARE: "on", CAPACITY_POD: 1 }, true);
    await publishAssignment(d, job("t1", 1));
    await publishAssignment(d, job("t2", 2, "b/fix"));
    await d.reconcile("test", PASS_BUDGET_MS);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "capacity_wait" });
    expect((await recordOf(d, "t2"))!.askedBy).toBeUndefined();
    // t2's message is held (out, not acked) while it waits.
    expect(await streamState(env)).toMatchObject({ messages: 2, ackPending: 2 });
    await claimAssignment(d, "t1");
    await completeAssignmentRun(d, "t1");
    // The completion's pass gives t2 its turn and asks for its runner itself.
    await d.reconcile("release", PASS_BUDGET_MS);
    const t2 = (await recordOf(d, "t2"))!;
    expect(t2).toMatchObject({ state: "backend_ready" });
    expect(t2.chosen).toBeUndefined();
    expect(parseAckSubject(t2.askedBy!).seq).toBe(2);
    expect(await streamState(env)).toEqual({ messages: 1, ackPending: 1, pending: 0 });
    expect(await claimAssignment(d, "t2")).toMatchObject({ held: true });
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
  });

  it("near misses: a claim that is refused (an old token, an ended assignment) acks nothing", async () => {
    const { env, d } = await scene({});
    await publishAssignment(d, job("r1", 1));
    await d.reconcile("test", PASS_BUDGET_MS);
    await expect(claimAssignment(d, "r1", { incarnation: "old" })).rejects.toThrow(/earlier assignment/);
    expect(await streamState(env)).toMatchObject({ ackPending: 1 });
    await cancelAssignment(d, "r1", "cancelled");
    await expect(claimAssignment(d, "r1")).rejects.toThrow(/terminated and cannot be claimed/);
    expect(await streamState(env)).toMatchObject({ ackPending: 1 });
    expect(events.filter((e) => e.assignment === "r1" && e.event === "acked")).toEqual([]);
  });

  /** A delivery of a waiting job at `ackSubject`, and the effects' dependencies, which keep each record written. */
  function delivery(id: string, ackSubject: string, record: Partial<AssignmentRecord> = {}) {
    const known = written({ ...assignment(id), state: "capacity_wait", receivedAt: "2026-12-04T00:00:00Z", ...record });
    const writes: AssignmentRecord[] = [];
    const p = {
      msg: { ackSubject, data: new Uint8Array() } as unknown as DeliveredMessage,
      assignment: assignment(id),
      known: { value: known, revision: 1 },
      facts: { now: 0, budgetSpent: false, jitter: 0 },
      reserved: false,
    } satisfies Prepared;
    const deps = {
      now: Date.now,
      backend: "pod",
      waiting: { set: { add: async () => 1 } },
      records: {
        updateFrom: async (k: Versioned<AssignmentRecord>, change: Transition) => {
          const next = change(k.value);
          if (next) writes.push(next);
          return { value: next ?? k.value, revision: k.revision + 1 };
        },
      },
    } as unknown as ProcessDeps;
    return { known, p, deps, writes };
  }

  it("is written by the write that asks for the runner, naming this delivery over one an earlier write named", async () => {
    const old = "$JS.ACK.S.pod.1.3.3.0.0";
    const now = "$JS.ACK.S.pod.1.9.9.0.0";
    const { known, p, deps } = delivery("w1", now, { askedBy: old });
    expect(await applyEffects(deps, p, ["mark_waiting"], undefined)).toMatchObject({ askedBy: old });
    expect(await applyEffects(deps, { ...p, known: { value: known, revision: 1 } }, ["mark_pending"], undefined)).toMatchObject({
      state: "backend_pending",
      askedBy: now,
    });
  });

  it("a job that goes into the wait set names its delivery in the record (heldBy); near miss: a wait without the wait set (FAIR_SHARE=off) writes nothing", async () => {
    const now = "$JS.ACK.S.pod.1.9.9.0.0";
    const { p, deps, writes } = delivery("w2", now);
    await applyEffects(deps, { ...p }, ["mark_waiting"], undefined);
    expect(writes).toEqual([]);
    expect(await applyEffects(deps, { ...p }, ["enter_wait_set", "mark_waiting"], undefined)).toMatchObject({ state: "capacity_wait", heldBy: now });
    expect(writes).toHaveLength(1);
  });

  it("near misses: a subject that is not an ack subject is not published to, and an ack that fails leaves the message to a pass", async () => {
    const { env, d } = await scene({});
    await publishAssignment(d, job("n1", 1));
    await publishAssignment(d, job("n2", 2));
    await d.reconcile("test", PASS_BUDGET_MS);
    const real = (await recordOf(d, "n2"))!.askedBy!;
    const seen: string[] = [];
    await d.withState(async ({ records }, handle) => {
      const sub = handle.nc.subscribe("dispatch.>", { callback: (_err, m) => void seen.push(m.subject) });
      await handle.nc.flush();
      await records.update("n1", (r) => written({ ...r, askedBy: "dispatch.not-an-ack" }));
      // The same message's subject under a consumer that does not exist: nobody answers.
      await records.update("n2", (r) => written({ ...r, askedBy: real.replace(/^(\$JS\.ACK\.[^.]+\.)[^.]+/, "$1nobody") }));
      expect(await claimAssignment(d, "n1")).toMatchObject({ state: "claimed", held: false });
      expect(await claimAssignment(d, "n2")).toMatchObject({ state: "claimed", held: false });
      await handle.nc.flush();
      sub.unsubscribe();
    });
    expect(seen).toEqual([]);
    expect(await streamState(env)).toMatchObject({ ackPending: 2 });
    expect(events.filter((e) => ["n1", "n2"].includes(e.assignment) && e.event === "acked")).toEqual([]);
  });
});
