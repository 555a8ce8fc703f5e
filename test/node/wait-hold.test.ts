// A waiting job's message is held, not acked (fair share, reconcile/give-turn.ts): out on a long
// nak, so that the pass that gives its turn asks for its runner itself and the claim acks it.
// Against the real nats-server, with the hold's end brought forward by a nak at the message's
// subject (as if its 2 minutes had passed): its delivery finds it still waiting and holds it again,
// with no second entry; a job cancelled while it waits is termed; a delivery that comes back
// after its turn keeps the turn's slot and asks for no second runner.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type Dispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { claimAssignment, completeAssignmentRun } from "../../src/domain/operations.ts";
import { cancelAssignment } from "../../src/domain/cancel.ts";
import { flushNats } from "../../src/nats/connection.ts";
import { parseAckSubject } from "../../src/nats/pull.ts";
import { streamState } from "../harness/nats.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
const BUDGET_MS = 15_000;

async function scene() {
  const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 1_000, FAIR_SHARE: "on", CAPACITY_POD: 1 });
  await provisionEnv(env);
  await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: 1_000 }) });
  const d = createDispatcher({ config: loadConfig(env), sink: quiet });
  return { env, d };
}

const job = (id: string, n: number, repository: string) => ({ ...assignment(id), job: { id: n, runId: 1, attempt: 1, repository } });
const recordOf = (d: Dispatcher, id: string) => d.withState(({ records }) => records.get(id));
const waiting = (d: Dispatcher) => d.withState(({ waiting }) => waiting.oldest("pod", 32));
/** Ends a held message's hold now, from another connection: a nak at the subject its entry names. */
const endHold = (d: Dispatcher, subject: string) =>
  d.withState(async (_s, handle) => {
    handle.nc.publish(subject, new TextEncoder().encode("-NAK"));
    await flushNats(handle.nc);
  });

/** t1 holds the only slot (its runner booting); t2 waits, its message held. */
async function oneWaits() {
  const { env, d } = await scene();
  await publishAssignment(d, job("t1", 1, "a/mono"));
  await publishAssignment(d, job("t2", 2, "b/fix"));
  await d.reconcile("test", BUDGET_MS);
  const [entry] = await waiting(d);
  return { env, d, entry: entry! };
}

describe("a waiting job's held message", () => {
  it("is out, not acked, and its entry names where it is held", async () => {
    const { env, d, entry } = await oneWaits();
    expect(await recordOf(d, "t2")).toMatchObject({ state: "capacity_wait" });
    expect(entry).toMatchObject({ id: "t2", repository: "b/fix" });
    expect(entry.ack).toMatch(/^\$JS\.ACK\..*\.1\.2\.2\./);
    expect(await streamState(env)).toEqual({ messages: 2, ackPending: 2, pending: 0 });
    // Held for 2 minutes, not RETRY_DELAY_MS: a pass now pulls nothing.
    expect((await d.reconcile("test", BUDGET_MS))[0]).toMatchObject({ fetched: 0 });
  });

  it("comes back when its hold ends to find its job still waiting: held again, no second entry, nothing asked", async () => {
    const { env, d, entry } = await oneWaits();
    await endHold(d, entry.ack!);
    const [pass] = await d.reconcile("test", BUDGET_MS);
    expect(pass).toMatchObject({ fetched: 1, naked: 1, acked: 0 });
    expect((await waiting(d)).map((h) => [h.id, h.seq])).toEqual([["t2", entry.seq]]);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "capacity_wait" });
    expect(await streamState(env)).toEqual({ messages: 2, ackPending: 2, pending: 0 });
    // Held again: the next pass pulls nothing.
    expect((await d.reconcile("test", BUDGET_MS))[0]).toMatchObject({ fetched: 0 });
  });

  it("that came back from its hold is named in the record (its latest delivery), where its turn's verdict goes: the runner booting is looked at again after the usual delay", async () => {
    const { d, entry } = await oneWaits();
    expect((await recordOf(d, "t2"))!.heldBy).toBe(entry.ack);
    await endHold(d, entry.ack!);
    await d.reconcile("test", BUDGET_MS);
    const latest = (await recordOf(d, "t2"))!.heldBy!;
    // Near miss: the entry still names the first delivery, whose nak the server now ignores.
    expect(parseAckSubject(latest)).toEqual({ seq: 2, deliveryCount: 2 });
    expect(latest).not.toBe(entry.ack);
    await claimAssignment(d, "t1");
    await completeAssignmentRun(d, "t1");
    await d.reconcile("release", BUDGET_MS);
    expect(await recordOf(d, "t2")).toMatchObject({ state: "backend_pending", askedBy: latest });
    // The turn's "pending" nak (RETRY_DELAY_MS, shortened here) brings the message back.
    await new Promise((r) => setTimeout(r, 1_200));
    expect((await d.reconcile("test", BUDGET_MS))[0]).toMatchObject({ fetched: 1 });
  });

  it("of a job cancelled while it waits is termed when it comes back; its entry goes at its turn, which asks for nothing", async () => {
    const { env, d, entry } = await oneWaits();
    await cancelAssignment(d, "t2", "cancelled");
    await endHold(d, entry.ack!);
    expect((await d.reconcile("test", BUDGET_MS))[0]).toMatchObject({ fetched: 1, termed: 1 });
    expect(await streamState(env)).toEqual({ messages: 1, ackPending: 1, pending: 0 });
    await claimAssignment(d, "t1");
    await completeAssignmentRun(d, "t1");
    await d.reconcile("release", BUDGET_MS);
    expect(await waiting(d)).toEqual([]);
    expect(await d.withState(({ admission }) => admission.holders("pod"))).toEqual([]);
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
  });

  it("that comes back after its turn keeps the turn's slot and asks for no second runner", async () => {
    const { env, d, entry } = await oneWaits();
    await claimAssignment(d, "t1");
    await completeAssignmentRun(d, "t1");
    await d.reconcile("release", BUDGET_MS);
    const asked = await recordOf(d, "t2");
    expect(asked).toMatchObject({ state: "backend_pending", askedBy: entry.ack });
    expect(await waiting(d)).toEqual([]);
    await endHold(d, entry.ack!);
    expect((await d.reconcile("test", BUDGET_MS))[0]).toMatchObject({ fetched: 1, naked: 1 });
    expect(await d.withState(({ admission }) => admission.holders("pod"))).toEqual(["t2"]);
    expect((await recordOf(d, "t2"))!.runner).toEqual(asked!.runner);
    const { runners } = (await (await fetch(`${env.POD_BACKEND_URL}/_control/state`)).json()) as { runners: { id: string }[] };
    expect(runners.filter((r) => r.id === "t2")).toHaveLength(1);
    expect(await claimAssignment(d, "t2")).toMatchObject({ held: true });
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
  });
});
