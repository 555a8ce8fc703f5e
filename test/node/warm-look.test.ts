// The isolate's look at its pools' idle warm runners (state/warm-look.ts), over a counted reader
// and a given clock: one read answers a burst's passes for LOOK_MS; promises are never more than
// the idle runners, outlive a read until their job's grace ends, and one goes when a warm runner
// of the pool takes a job here. Near misses: a read just inside and just past LOOK_MS, a promise
// just at its end, another pool's take, a failed read (not kept), a clock that went back.
import { describe, expect, it } from "vitest";
import { createWarmLook, LOOK_MS } from "../../src/state/warm-look.ts";

function reader(idle: Record<string, number>) {
  const r = { reads: 0, idle, fail: false };
  const read = async () => {
    r.reads++;
    if (r.fail) throw new Error("NATS went away");
    return new Map(Object.entries(r.idle));
  };
  return { r, read };
}

describe("the isolate's look at idle warm runners", () => {
  it("promises no more than are idle, across passes, with one read per LOOK_MS", async () => {
    const look = createWarmLook();
    const { r, read } = reader({ p: 2, q: 1 });
    const took = await Promise.all([look.take("p", 0, 5_000, read), look.take("p", 10, 5_000, read), look.take("p", 20, 5_000, read)]);
    expect(took).toEqual([true, true, false]);
    expect(await look.take("q", LOOK_MS - 1, 5_000, read)).toBe(true);
    expect(r.reads).toBe(1);
    // Past LOOK_MS: read again; the promises still stand (their runners have not taken a job yet).
    expect(await look.take("p", LOOK_MS, 5_000, read)).toBe(false);
    expect(r.reads).toBe(2);
  });

  it("a promise ends with its job's grace; a warm runner's take here keeps one and reads again", async () => {
    const look = createWarmLook();
    const { r, read } = reader({ p: 1 });
    expect(await look.take("p", 0, 3_000, read)).toBe(true);
    expect(await look.take("p", 2_999, 8_000, read)).toBe(false);
    expect(await look.take("p", 3_000, 8_000, read)).toBe(true);
    // The runner took a job here: its promise is kept, and the next take reads (now none idle).
    look.tookJob("p");
    r.idle.p = 0;
    const reads = r.reads;
    expect(await look.take("p", 3_010, 9_000, read)).toBe(false);
    expect(r.reads).toBe(reads + 1);
    // Another pool's take keeps none of p's.
    r.idle.p = 1;
    expect(await look.take("p", 4_100, 9_000, read)).toBe(true);
    look.tookJob("q");
    expect(await look.take("p", 4_200, 9_000, read)).toBe(false);
  });

  it("a failed read is not kept; a clock that went back reads again", async () => {
    const look = createWarmLook();
    const { r, read } = reader({ p: 1 });
    r.fail = true;
    await expect(look.take("p", 0, 5_000, read)).rejects.toThrow("NATS went away");
    r.fail = false;
    expect(await look.take("p", 1, 5_000, read)).toBe(true);
    expect(r.reads).toBe(2);
    await look.take("p", 0, 5_000, read);
    expect(r.reads).toBe(3);
  });
});

describe("a look that found none idle", () => {
  it("is not kept: the next take reads again, and sees a runner that came up meanwhile; near miss: another pool's idle ones keep the read", async () => {
    const look = createWarmLook();
    const { r, read } = reader({ p: 0, q: 1 });
    expect(await look.take("p", 0, 5_000, read)).toBe(false);
    r.idle.p = 1;
    expect(await look.take("p", 10, 5_000, read)).toBe(true);
    expect(r.reads).toBe(2);
    expect(await look.take("q", 20, 5_000, read)).toBe(true);
    expect(r.reads).toBe(2);
  });
});
