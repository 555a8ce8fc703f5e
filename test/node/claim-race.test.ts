// A runner's claim that wins the race with the pass's own write of its readiness
// (reconcile/process.ts finishMessage), over in-memory records: the claim acked the delivery its
// registration names (askedBy) and told it, so the pass counts it acked without a second ack or a
// second "acked". Near miss: a registration that named an earlier delivery of the message, whose
// claim acked that one; this delivery is acked and told by the pass.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import { finishMessage } from "../../src/reconcile/process.ts";
import type { Prepared, ProcessDeps } from "../../src/reconcile/types.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { memoryRecords } from "../harness/memory.ts";

const TRUST = "dispatch.test";
const decoded = completeAssignment({ version: 1, id: "r-1", backend: "pod", labels: ["x"] }, TRUST, new Date(0));
if (!decoded.ok) throw new Error("bad fixture");
const assignment = decoded.assignment;
const THIS_DELIVERY = "$JS.ACK.S.pod.1.7.2.0.0";
const base = { id: "r-1", backend: "pod", receivedAt: "2026-12-07T00:00:00Z", contentHash: "h", askedAt: "2026-12-07T00:00:01Z" } as const;

/** The pass read the record pending (asked for by `askedBy`); the claim came before its write. */
async function race(askedBy: string) {
  const pending = { ...base, state: "backend_pending", askedBy } as AssignmentRecord;
  const mem = memoryRecords([{ ...pending, state: "claimed", claimedAt: "2026-12-07T00:00:02Z" } as AssignmentRecord]);
  const sent: string[] = [];
  const events: string[] = [];
  const deps = {
    backend: "pod",
    trustDomain: TRUST,
    policy: { claimTimeoutMs: 60_000 },
    pools: new Map(),
    records: mem.records,
    now: () => Date.parse("2026-12-07T00:00:03Z"),
    sink: { event: (e: { event: string }) => void events.push(e.event), summary: () => undefined, error: () => undefined },
    admission: { release: async () => false },
  } as unknown as ProcessDeps;
  const p: Prepared = {
    msg: {
      data: encodeAssignment(assignment),
      seq: 7,
      deliveryCount: 2,
      ackSubject: THIS_DELIVERY,
      ack: () => undefined,
      ackAck: async () => void sent.push("ack"),
      nak: (d: number) => void sent.push(`nak ${d}`),
      term: () => void sent.push("term"),
    },
    facts: { now: 0, budgetSpent: false, decoded: true, offer: "same", state: "backend_pending", backend: "ready", admitted: true, waitedMs: 0, jitter: 0.5 },
    assignment,
    known: { value: pending, revision: 1 },
    reserved: false,
  } as unknown as Prepared;
  const verdict = await finishMessage(deps, p, false);
  return { verdict, sent, events };
}

describe("a claim that wins the race with the pass's readiness write", () => {
  it("its claim acked this delivery: counted acked, not acked again nor told twice", async () => {
    const { verdict, sent, events } = await race(THIS_DELIVERY);
    expect(verdict.action.kind).toBe("ack");
    expect(sent).toEqual([]);
    expect(events).toEqual(["backend_ready"]);
  });

  it("its registration named an earlier delivery: this one is acked and told", async () => {
    const { verdict, sent, events } = await race("$JS.ACK.S.pod.1.7.1.0.0");
    expect(verdict.action.kind).toBe("ack");
    expect(sent).toEqual(["ack"]);
    expect(events).toEqual(["backend_ready", "runner_claimed", "acked"]);
  });
});
