import { describe, expect, it } from "vitest";
import { decide, waitHoldDelay, type Facts, type Policy } from "../../src/reconcile/decide.ts";

const policy: Policy = { claimTimeoutMs: 240_000, bootTimeoutMs: 600_000 };
const NOW = 1_000_000_000;
const base: Facts = { now: NOW, budgetSpent: false };
const upToBackend: Facts = { ...base, decoded: true, offer: "new", state: "received", admitted: true };

describe("decide: fact gathering order", () => {
  it.each([
    [{ ...base }, "decode"],
    [{ ...base, decoded: true }, "offer"],
    [{ ...base, decoded: true, offer: "new", state: "received" }, "admit"],
    [{ ...base, decoded: true, offer: "same", state: "capacity_wait" }, "admit"],
    [{ ...base, decoded: true, offer: "same", state: "backend_ready", readyAt: NOW }, "admit"],
    [{ ...base, decoded: true, offer: "new", state: "received", admitted: true }, "call_backend"],
  ] as [Facts, string][])("%o asks for %s", (facts, next) => {
    expect(decide(facts, policy)).toEqual({ next });
  });
});

describe("decide: the reconciliation table, row by row", () => {
  const rows: [string, Facts, object][] = [
    [
      "budget spent → nak 0, deferred",
      { ...base, budgetSpent: true, decoded: true },
      { action: { kind: "nak", delayMs: 0 }, events: ["deferred"], effects: [] },
    ],
    ["undecodable → term invalid", { ...base, decoded: false }, { action: { kind: "term", reason: "invalid assignment" }, events: ["invalid"], effects: [] }],
    [
      "conflicting → term conflicting",
      { ...base, decoded: true, offer: "conflict" },
      { action: { kind: "term", reason: "conflicting assignment" }, events: ["conflict"], effects: [] },
    ],
    [
      "a new job while a warm runner of its pool is idle → nak for the rest of its grace, no slot taken",
      { ...base, decoded: true, offer: "new", state: "received", warmGraceMs: 3_200 },
      { action: { kind: "nak", delayMs: 3_200 }, events: ["warm_grace"], effects: [] },
    ],
    [
      "grace over (0) → admitted as usual",
      { ...base, decoded: true, offer: "new", state: "received", warmGraceMs: 0, admitted: false },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["capacity_wait"], effects: ["mark_waiting"] },
    ],
    [
      "not up within its pool's boot timeout → torn down, asked for again after 15 s",
      { ...upToBackend, state: "backend_pending", askedAt: NOW - 600_001 },
      { action: { kind: "nak", delayMs: 15_000 }, events: ["boot_timeout"], effects: ["boot_retry"] },
    ],
    [
      "the second time → after 30 s",
      { ...upToBackend, state: "backend_pending", askedAt: NOW - 600_001, bootAttempts: 1 },
      { action: { kind: "nak", delayMs: 30_000 }, events: ["boot_timeout"], effects: ["boot_retry"] },
    ],
    [
      "the third time → given up: term, the job stays queued in Gitea",
      { ...upToBackend, state: "backend_pending", askedAt: NOW - 600_001, bootAttempts: 2 },
      { action: { kind: "term", reason: "its runner did not boot in 3 attempts" }, events: ["boot_timeout", "boot_gave_up"], effects: ["give_up_boot"] },
    ],
    [
      "no slot → nak 2 s capacity_wait",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["capacity_wait"], effects: ["mark_waiting"] },
    ],
    [
      "no slot, fair share → the wait set keeps it, its message held 2 min (jitter 0.5)",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false, waitSet: true },
      { action: { kind: "nak", delayMs: 120_000 }, events: ["capacity_wait"], effects: ["enter_wait_set", "mark_waiting"] },
    ],
    [
      "owner or repository at its QUOTAS limit → the wait set keeps it, quota_wait, its message held",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false, waitSet: true, quota: true },
      { action: { kind: "nak", delayMs: 120_000 }, events: ["quota_wait"], effects: ["enter_wait_set", "mark_quota_wait"] },
    ],
    [
      "admitted, fair share → as usual",
      { ...base, decoded: true, offer: "same", state: "capacity_wait", admitted: true, waitSet: false },
      { next: "call_backend" },
    ],
    [
      "no slot, lowest jitter → nak 1 s",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false, jitter: 0 },
      { action: { kind: "nak", delayMs: 1_000 }, events: ["capacity_wait"], effects: ["mark_waiting"] },
    ],
    [
      "no slot, highest jitter → nak just under 3 s",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false, jitter: 0.9995 },
      { action: { kind: "nak", delayMs: 2_999 }, events: ["capacity_wait"], effects: ["mark_waiting"] },
    ],
    [
      "no slot, jitter out of range → clamped to 3 s",
      { ...base, decoded: true, offer: "new", state: "received", admitted: false, jitter: 7 },
      { action: { kind: "nak", delayMs: 3_000 }, events: ["capacity_wait"], effects: ["mark_waiting"] },
    ],
    [
      "backend error → release, nak 15 s",
      { ...upToBackend, backend: "error" },
      { action: { kind: "nak", delayMs: 15_000 }, events: ["backend_retry"], effects: ["release_slot", "mark_pending"] },
    ],
    [
      "backend refused our credentials → release, nak 15 s, loud",
      { ...upToBackend, backend: "auth_error" },
      { action: { kind: "nak", delayMs: 15_000 }, events: ["backend_auth", "backend_retry"], effects: ["release_slot", "mark_pending"] },
    ],
    [
      "a cloud refused our credentials or a template's field → release, nak 60 s (not transient: a rate budget is not spent on refusals)",
      { ...upToBackend, backend: "refused" },
      { action: { kind: "nak", delayMs: 60_000 }, events: ["backend_retry"], effects: ["release_slot", "mark_pending"] },
    ],
    [
      "what it was to run on is gone, and nothing may stand in (a warm runner by reuse whose server a job took) → term, ended",
      { ...upToBackend, backend: "unneeded" },
      { action: { kind: "term", reason: "what its runner was to run on is gone" }, events: ["backend_unneeded"], effects: ["end_unneeded"] },
    ],
    [
      "backend pending → nak 2 s",
      { ...upToBackend, backend: "pending" },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["backend_pending"], effects: ["mark_pending"] },
    ],
    [
      "claimed → double-ack",
      { ...base, decoded: true, offer: "same", state: "claimed" },
      { action: { kind: "ack" }, events: ["runner_claimed", "acked"], effects: [] },
    ],
    [
      "completed before the ack → double-ack, no backend call",
      { ...base, decoded: true, offer: "same", state: "completed" },
      { action: { kind: "ack" }, events: ["runner_claimed", "acked"], effects: [] },
    ],
    [
      "first ready → remember ready time, nak 2 s claim_pending",
      { ...upToBackend, backend: "ready" },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["backend_ready", "claim_pending"], effects: ["mark_ready"] },
    ],
    [
      "ready within claim timeout → nak, backing off to 30 s",
      { ...upToBackend, backend: "ready", readyAt: NOW - 240_000 },
      { action: { kind: "nak", delayMs: 30_000 }, events: ["backend_ready", "claim_pending"], effects: [] },
    ],
    [
      "claim timeout passed → teardown, forget, nak 2 s",
      { ...upToBackend, backend: "ready", readyAt: NOW - 240_001 },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["backend_ready", "claim_timeout"], effects: ["forget_ready_and_teardown"] },
    ],
    [
      "waiting for the claim a moment → nak 2 s, backend not asked",
      { ...upToBackend, state: "backend_ready", readyAt: NOW - 1_000 },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["claim_pending"], effects: [] },
    ],
    [
      "waiting for the claim 10 s → nak 5 s, backend not asked",
      { ...upToBackend, state: "backend_ready", readyAt: NOW - 10_000 },
      { action: { kind: "nak", delayMs: 5_000 }, events: ["claim_pending"], effects: [] },
    ],
    [
      "waiting for the claim 4 min → nak 30 s, backend not asked",
      { ...upToBackend, state: "backend_ready", readyAt: NOW - 240_000 },
      { action: { kind: "nak", delayMs: 30_000 }, events: ["claim_pending"], effects: [] },
    ],
    [
      "waited past the claim timeout → teardown, forget, nak 2 s",
      { ...upToBackend, state: "backend_ready", readyAt: NOW - 240_001 },
      { action: { kind: "nak", delayMs: 2_000 }, events: ["claim_timeout"], effects: ["forget_ready_and_teardown"] },
    ],
    [
      "terminated → term with its reason",
      { ...base, decoded: true, offer: "same", state: "terminated", reason: "cancelled" },
      { action: { kind: "term", reason: "cancelled" }, events: ["already_done"], effects: [] },
    ],
    [
      "terminated after this pass took its slot (seen storing its registration) → term, slot released",
      { ...upToBackend, state: "terminated", reason: "its job ran on warm runner w" },
      { action: { kind: "term", reason: "its job ran on warm runner w" }, events: ["already_done"], effects: ["release_slot"] },
    ],
    [
      "terminated, and refused a slot → term, nothing to release",
      { ...base, decoded: true, offer: "same", state: "terminated", admitted: false },
      { action: { kind: "term", reason: "terminated" }, events: ["already_done"], effects: [] },
    ],
  ];
  it.each(rows)("%s", (_name, facts, expected) => {
    expect(decide(facts, policy)).toEqual({ next: "done", ...expected });
  });

  it("RETRY_DELAY_MS overrides every nak delay but the deferred one", () => {
    const p: Policy = { ...policy, retryDelayMs: 777 };
    for (const facts of [
      { ...base, decoded: true, offer: "new", state: "received", admitted: false },
      { ...upToBackend, backend: "error" },
      { ...upToBackend, backend: "auth_error" },
      { ...upToBackend, backend: "refused" },
      { ...upToBackend, backend: "pending" },
      { ...upToBackend, backend: "ready" },
      { ...upToBackend, backend: "ready", readyAt: NOW - 10 },
      { ...upToBackend, backend: "ready", readyAt: 0 },
    ] as Facts[]) {
      expect(decide(facts, p)).toMatchObject({ action: { kind: "nak", delayMs: 777 } });
    }
    expect(decide({ ...base, budgetSpent: true }, p)).toMatchObject({ action: { kind: "nak", delayMs: 0 } });
  });

  it("a waiting job's message is held half the time it waited, from 2 to 5 min, spread by a fifth; RETRY_DELAY_MS does not shorten it", () => {
    expect(waitHoldDelay(0, 0.5)).toBe(120_000);
    // Near misses at the floor: a job that waited 4 min is held 2 min, one that waited 4 min and 2 ms a millisecond more.
    expect(waitHoldDelay(240_000, 0.5)).toBe(120_000);
    expect(waitHoldDelay(240_002, 0.5)).toBe(120_001);
    expect(waitHoldDelay(8 * 60_000, 0.5)).toBe(4 * 60_000);
    // The ceiling: a long wait costs a delivery every 5 minutes (and MaxDeliver, 1000, is days away).
    expect(waitHoldDelay(10 * 60_000, 0.5)).toBe(5 * 60_000);
    expect(waitHoldDelay(24 * 3_600_000, 0.5)).toBe(5 * 60_000);
    expect([waitHoldDelay(0, 0), waitHoldDelay(0, 1), waitHoldDelay(0, 7)]).toEqual([96_000, 144_000, 144_000]);
    const waits = { ...base, decoded: true, offer: "same", state: "received", admitted: false, waitSet: true, waitedMs: 8 * 60_000, jitter: 0.5 } as Facts;
    expect(decide(waits, { ...policy, retryDelayMs: 777 })).toMatchObject({ action: { kind: "nak", delayMs: 4 * 60_000 } });
    expect(decide({ ...waits, quota: true }, policy)).toMatchObject({ action: { kind: "nak", delayMs: 4 * 60_000 } });
  });

  it("a boot is timed only in a pool, only while pending, and only past its timeout", () => {
    const pending = { ...upToBackend, state: "backend_pending", askedAt: NOW - 600_001 } as Facts;
    expect(decide({ ...pending, askedAt: NOW - 600_000 }, policy)).toEqual({ next: "call_backend" });
    expect(decide(pending, { claimTimeoutMs: 240_000 })).toEqual({ next: "call_backend" });
    expect(decide({ ...pending, state: "capacity_wait" }, policy)).toEqual({ next: "call_backend" });
    expect(decide({ ...pending, askedAt: undefined }, policy)).toEqual({ next: "call_backend" });
    // A claim that came meanwhile wins: acked, never given up.
    expect(decide({ ...pending, state: "claimed" }, policy)).toMatchObject({ action: { kind: "ack" } });
    // RETRY_DELAY_MS shortens the wait between attempts, as every other nak.
    expect(decide(pending, { ...policy, retryDelayMs: 30 })).toMatchObject({ action: { kind: "nak", delayMs: 30 }, effects: ["boot_retry"] });
  });

  it("budget is checked before anything else, even an invalid message", () => {
    expect(decide({ ...base, budgetSpent: true, decoded: false }, policy)).toMatchObject({ events: ["deferred"] });
  });

  it("never acks an assignment nobody claimed", () => {
    const states = ["received", "capacity_wait", "backend_pending", "backend_ready"] as const;
    for (const state of states)
      for (const backend of [undefined, "error", "auth_error", "refused", "pending", "ready"] as const)
        for (const readyAt of [undefined, NOW, 0]) {
          const step = decide({ ...upToBackend, state, backend, readyAt }, policy);
          expect(step).not.toMatchObject({ action: { kind: "ack" } });
        }
  });

  it("asks the backend about every unready state, and never about a ready runner before its claim timeout", () => {
    for (const state of ["received", "capacity_wait", "backend_pending", "backend_ready"] as const)
      for (const readyAt of [undefined, NOW, NOW - 240_001]) {
        const step = decide({ ...upToBackend, state, readyAt }, policy);
        const waiting = state === "backend_ready" && readyAt !== undefined;
        expect(step.next === "call_backend").toBe(!waiting);
      }
  });
});
