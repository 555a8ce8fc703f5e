import { describe, expect, it } from "vitest";
import { createCoalescer } from "../../src/gateway/coalesce.ts";

/** A run that the test finishes by hand. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

describe("coalescing eager passes", () => {
  it("runs once for a lone caller and answers its result", async () => {
    const c = createCoalescer<number>();
    let runs = 0;
    expect(await c.run("k", async () => ++runs, { until: Date.now() + 1_000 })).toBe(1);
    expect(runs).toBe(1);
    expect(c.inFlight).toBe(0);
  });

  it("callers during a run answer at once, and one more run takes their work", async () => {
    const c = createCoalescer<number>();
    const g = gate();
    let runs = 0;
    const first = c.run("k", async () => (++runs === 1 ? (await g.opened, runs) : runs), { until: Date.now() + 1_000 });
    const later = await Promise.all([1, 2, 3].map(() => c.run("k", async () => -1, { until: Date.now() + 1_000 })));
    expect(later).toEqual([undefined, undefined, undefined]);
    g.open();
    expect(await first).toBe(2);
    expect(runs).toBe(2);
    expect(c.inFlight).toBe(0);
  });

  it("runs up to `limit` at once; the caller past it answers at once and is taken by one more round", async () => {
    const c = createCoalescer<number>(2);
    const gates = [gate(), gate()];
    let runs = 0;
    const started = [0, 1].map((i) =>
      c.run(
        "k",
        async (round) => {
          runs++;
          if (round === 0) await gates[i]!.opened;
          return round;
        },
        { until: Date.now() + 1_000 },
      ),
    );
    expect(c.inFlight).toBe(2);
    expect(await c.run("k", async () => -1, { until: Date.now() + 1_000 })).toBeUndefined();
    gates[0]!.open();
    expect(await started[0]).toBe(1);
    gates[1]!.open();
    expect(await started[1]).toBe(0);
    expect(runs).toBe(3);
    expect(c.inFlight).toBe(0);
  });

  it("keys apart run apart", async () => {
    const c = createCoalescer<string>();
    const g = gate();
    const a = c.run("pod", async () => (await g.opened, "pod"), { until: Date.now() + 1_000 });
    expect(await c.run("vm", async () => "vm", { until: Date.now() + 1_000 })).toBe("vm");
    g.open();
    expect(await a).toBe("pod");
  });

  it("numbers its rounds, and starts none past `until`", async () => {
    const c = createCoalescer<number>();
    let clock = 0;
    const rounds: number[] = [];
    // Every run brings a caller that asks for one more.
    const run = async (round: number) => {
      rounds.push(round);
      clock += 10;
      await c.run("k", async () => -1, { until: 25, now: () => clock });
      return round;
    };
    expect(await c.run("k", run, { until: 25, now: () => clock })).toBe(2);
    expect(rounds).toEqual([0, 1, 2]);
  });

  it("a caller arriving during the last run is still taken by a run", async () => {
    const c = createCoalescer<number>();
    const gates = [gate(), gate()];
    let runs = 0;
    const first = c.run(
      "k",
      async () => {
        const n = runs++;
        await gates[n]?.opened;
        return n;
      },
      { until: Date.now() + 1_000 },
    );
    await c.run("k", async () => -1, { until: Date.now() + 1_000 });
    gates[0]!.open();
    await new Promise((r) => setTimeout(r, 0));
    // The second run is in flight now: a caller asks again.
    expect(await c.run("k", async () => -1, { until: Date.now() + 1_000 })).toBeUndefined();
    gates[1]!.open();
    await first;
    expect(runs).toBe(3);
  });

  it("a failed run frees the key for the next caller", async () => {
    const c = createCoalescer<number>();
    await expect(
      c.run(
        "k",
        async () => {
          throw new Error("nats down");
        },
        { until: Date.now() + 1_000 },
      ),
    ).rejects.toThrow("nats down");
    expect(await c.run("k", async () => 7, { until: Date.now() + 1_000 })).toBe(7);
  });
});
