// A cron pass holding ready runners' deliveries for their claims (reconcile/hold.ts), over
// in-memory records: a delivery its claim acked (the one its registration names, askedBy) is not
// acked again nor told twice; its near miss, a claim whose registration named an earlier delivery,
// is acked and told by the pass; one never claimed is nak'd after its window.
import { describe, expect, it } from "vitest";
import { holdForClaims } from "../../src/reconcile/hold.ts";
import type { ProcessDeps, Prepared } from "../../src/reconcile/types.ts";
import type { BatchSummary } from "../../src/model/events.ts";

function scene(records: Record<string, { state: string; askedBy?: string }>) {
  const events: string[] = [];
  const acks: string[] = [];
  const naks: string[] = [];
  const t = { now: 1_000 };
  const deps = {
    backend: "pod",
    policy: { retryDelayMs: 50 },
    now: () => t.now,
    sink: {
      event: (e: { event: string; assignment: string }) => void events.push(`${e.event} ${e.assignment}`),
      summary: () => undefined,
      error: () => undefined,
    },
    records: {
      getMany: async (ids: string[]) => new Map(ids.filter((id) => records[id]).map((id) => [id, { value: { id, ...records[id]! }, revision: 1 }])),
    },
  } as unknown as ProcessDeps;
  const held = (id: string, ackSubject: string): Prepared =>
    ({
      assignment: { id },
      heldUntil: t.now + 150,
      msg: {
        ackSubject,
        ackAck: async () => void acks.push(id),
        nak: () => void naks.push(id),
        term: () => undefined,
      },
    }) as unknown as Prepared;
  const summary = { acked: 0, naked: 0, termed: 0 } as BatchSummary;
  return { deps, held, summary, events, acks, naks, t };
}

describe("holdForClaims", () => {
  it("a delivery its claim acked is counted, not acked again nor told; one asked for by an earlier delivery is acked and told; one unclaimed is nak'd", async () => {
    const s = scene({
      mine: { state: "claimed", askedBy: "$JS.ACK.S.pod.1.7.7.1.2" },
      earlier: { state: "claimed", askedBy: "$JS.ACK.S.pod.1.8.8.1.1" },
      idle: { state: "backend_ready", askedBy: "$JS.ACK.S.pod.1.9.9.1.1" },
    });
    const clock = setInterval(() => (s.t.now += 60), 20);
    try {
      await holdForClaims(
        s.deps,
        [s.held("mine", "$JS.ACK.S.pod.1.7.7.1.2"), s.held("earlier", "$JS.ACK.S.pod.1.8.8.2.2"), s.held("idle", "$JS.ACK.S.pod.1.9.9.1.1")],
        s.summary,
      );
    } finally {
      clearInterval(clock);
    }
    expect(s.acks).toEqual(["earlier"]);
    expect(s.events).toEqual(["runner_claimed earlier", "acked earlier"]);
    expect(s.naks).toEqual(["idle"]);
    expect(s.summary).toMatchObject({ acked: 2, naked: 1 });
  });
});
