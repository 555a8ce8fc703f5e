// A runner's interruption report (domain/interrupt.ts) over in-memory stores: taken only where the
// backend's driver replaces on it (ec2), refused elsewhere (a Hetzner server would keep running
// while its identity went); the claim token's incarnation must be the runner's own, one report
// replaces once, and a second report of the replaced runner changes nothing.
import { describe, expect, it } from "vitest";
import { interruptAssignment } from "../../src/domain/interrupt.ts";
import { StaleClaimToken } from "../../src/domain/operations.ts";
import { Conflict } from "../../src/model/errors.ts";
import { incarnationOf, type AssignmentRecord } from "../../src/state/records.ts";
import { assignment } from "../harness/env.ts";
import { memoryRecords, written } from "../harness/memory.ts";

const NOW = Date.parse("2026-12-07T08:00:00Z");
const notice = "2026-12-07T08:02:00.000Z";

function scene(driver: "ec2" | "hetzner", state = "backend_ready") {
  const record = written({
    ...assignment("gitea-1-1"),
    state,
    backend: "pod",
    receivedAt: "2026-12-07T07:50:00Z",
    placement: { backend: "pod", pool: "spot" },
    ...(state === "claimed" ? { claimedAt: "2026-12-07T07:55:00Z" } : {}),
  });
  const mem = memoryRecords([record]);
  const ended: string[] = [];
  const released: unknown[] = [];
  const torn: string[] = [];
  const d = {
    now: () => NOW,
    sink: { event: () => undefined, error: () => undefined, summary: () => undefined },
    config: { maxReruns: 1, backends: [{ backend: "pod", driver, capacity: 1, batchSize: 1, ...(driver === "ec2" ? { interruptible: true } : {}) }] },
    withState: <T>(fn: (s: unknown) => Promise<T>) =>
      fn({
        records: mem.records,
        admission: {
          endRegistrations: async (_b: string, ids: string[]) => void ended.push(...ids),
          release: async (placement: unknown, id: string) => void released.push({ placement, id }),
        },
        reruns: { count: async () => undefined, rerunOf: async () => null, add: async () => undefined },
      }),
    callBackend: <T>(fn: (signal: AbortSignal) => Promise<T>) => fn(AbortSignal.timeout(1_000)),
    runnersFor: () => ({ teardown: async (id: string) => void torn.push(id) }),
    forge: undefined,
  } as never;
  return { d, mem, record, ended, released, torn };
}

describe("a runner's interruption report", () => {
  it("is refused where the backend's driver does not replace on it, and changes nothing", async () => {
    const s = scene("hetzner");
    const err = await interruptAssignment(s.d, "gitea-1-1", { notice, by: "runner", incarnation: incarnationOf(s.record) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Conflict);
    expect((err as Error).message).toContain("backend pod (driver hetzner)");
    expect(s.mem.rows.get("gitea-1-1")).toEqual(s.record);
    expect(s.ended).toEqual([]);
  });

  it("on ec2: replaces once for the runner's own incarnation; a token one incarnation off is refused; the replaced runner's second report changes nothing", async () => {
    const s = scene("ec2");
    const own = incarnationOf(s.record);
    await expect(interruptAssignment(s.d, "gitea-1-1", { notice, by: "runner", incarnation: `${own}r1` })).rejects.toBeInstanceOf(StaleClaimToken);
    expect((await interruptAssignment(s.d, "gitea-1-1", { notice, by: "runner", incarnation: own })).outcome).toBe("replaced");
    const after = s.mem.rows.get("gitea-1-1") as AssignmentRecord;
    expect(incarnationOf(after)).toBe(`${own}r1`);
    expect(s.ended).toEqual(["gitea-1-1"]);
    expect((await interruptAssignment(s.d, "gitea-1-1", { notice, by: "runner", incarnation: own })).outcome).toBe("over");
    expect(s.mem.rows.get("gitea-1-1")).toEqual(after);
  });

  it("after the claim: the job's backend and pool slots are given back as the report is handled, and its machine torn down", async () => {
    const s = scene("ec2", "claimed");
    const { outcome } = await interruptAssignment(s.d, "gitea-1-1", { notice, by: "runner", incarnation: incarnationOf(s.record) });
    expect(outcome).toBe("lost");
    expect(s.released).toEqual([{ placement: expect.objectContaining({ backend: "pod", pool: "spot" }), id: "gitea-1-1" }]);
    expect(s.torn).toEqual(["gitea-1-1"]);
  });
});
