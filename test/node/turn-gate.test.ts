// One turn-giving at a time per wait set within an isolate (reconcile/turn-gate.ts): a pass that
// finds another giving turns asks it for one more round and waits; it runs its own only when that
// round could not be run.
import { describe, expect, it } from "vitest";
import { createTurnGate } from "../../src/reconcile/turn-gate.ts";

/** A give() that stays open until released, counting its runs. */
function gates() {
  const runs: string[] = [];
  const open: (() => void)[] = [];
  const give = (who: string, n: number) => () =>
    new Promise<number>((resolve) => {
      runs.push(who);
      open.push(() => resolve(n));
    });
  const releaseAll = async () => {
    for (let i = 0; i < 20 && (open.length || i < 2); i++) {
      open.splice(0).forEach((r) => r());
      await new Promise((r) => setTimeout(r, 0));
    }
  };
  return { runs, give, releaseAll };
}

describe("the turn gate", () => {
  it("a second pass does not give the same turns: the first runs one more round for it", async () => {
    const gate = createTurnGate();
    const { runs, give, releaseAll } = gates();
    const first = gate("S/pod", give("first", 2), () => true);
    const second = gate("S/pod", give("second", 5), () => true);
    await releaseAll();
    expect(await first).toBe(4);
    expect(await second).toBe(0);
    expect(runs).toEqual(["first", "first"]);
  });

  it("near miss: another wait set (another backend or stream) is not held back", async () => {
    const gate = createTurnGate();
    const { runs, give, releaseAll } = gates();
    const a = gate("S/pod", give("pod", 1), () => true);
    const b = gate("S/vm", give("vm", 1), () => true);
    await releaseAll();
    expect([await a, await b]).toEqual([1, 1]);
    expect(runs.toSorted()).toEqual(["pod", "vm"]);
  });

  it("a first pass out of time leaves the round to the one that asked", async () => {
    const gate = createTurnGate();
    const { runs, give, releaseAll } = gates();
    const first = gate("S/pod", give("first", 1), () => false);
    const second = gate("S/pod", give("second", 3), () => true);
    await releaseAll();
    expect(await first).toBe(1);
    expect(await second).toBe(3);
    expect(runs).toEqual(["first", "second"]);
  });

  it("a first pass whose round failed leaves it to the one that asked; the failure is the first's", async () => {
    const gate = createTurnGate();
    let fail: (e: Error) => void = () => undefined;
    const first = gate(
      "S/pod",
      () => new Promise<number>((_, reject) => (fail = reject)),
      () => true,
    );
    const second = gate(
      "S/pod",
      async () => 7,
      () => true,
    );
    await new Promise((r) => setTimeout(r, 0));
    fail(new Error("NATS went away"));
    await expect(first).rejects.toThrow("NATS went away");
    expect(await second).toBe(7);
  });

  it("one after the other, each runs its own", async () => {
    const gate = createTurnGate();
    expect(
      await gate(
        "S/pod",
        async () => 1,
        () => true,
      ),
    ).toBe(1);
    expect(
      await gate(
        "S/pod",
        async () => 2,
        () => true,
      ),
    ).toBe(2);
  });
});
