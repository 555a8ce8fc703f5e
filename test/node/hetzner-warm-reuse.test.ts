// Warm by reuse at the hetzner driver, over the fake Hetzner API: the driver lists its parked
// servers with the end of each one's paid hour; a warm runner bound to one (assignment.reuse) is
// rebuilt on that server and no other, and never on a new one: with its server gone it is
// WorkloadUnneeded, its note gone, nothing created. A server within its
// pool's warmUntil of its hour's end is deleted, not parked. Near misses: an unbound request in the
// same state creates a server; a server just past warmUntil is parked.
import { beforeAll, describe, expect, it } from "vitest";
import { WorkloadUnneeded, type RunnerRequest } from "../../src/domain/backend.ts";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { bootOf } from "../../scripts/simulate-hetzner.mjs";
import { failure, type HetznerScene, keptScenes, vmRequest } from "../harness/hetzner.ts";

const HOUR = 3_600_000;
const WARM_UNTIL = 9 * 60_000;
const kept = keptScenes();
/** The parked list read by listing keys, or (as the dispatcher wires it) in one batch read under its prefix. */
let readUnder = false;
async function scene() {
  const s = await kept.scene({}, { readUnder });
  s.clock.t = Date.now();
  return s;
}
const pool = { name: "small", reuse: "rebuild" as const, warmUntil: WARM_UNTIL };
const request = (id: string) => vmRequest(id, pool);
/** A warm runner of the pool bound to parked server `server`. */
const bound = (id: string, server: number): RunnerRequest => {
  const r = request(id);
  return { ...r, assignment: { ...r.assignment, warm: true, reuse: { server } } };
};
const within = () => AbortSignal.timeout(3_000);
const kinds = async (s: HetznerScene) =>
  (await s.state()).requests.map((r) => `${r.method} ${r.path.replace(/\d+/g, "{id}")}`).filter((r) => !r.includes("_control"));

describe.each([
  ["its keys listed", false],
  ["one batch read", true],
])("warm by reuse at the hetzner driver, the parked list by %s", (_, batch) => {
  beforeAll(() => {
    readUnder = batch;
  });
  it("lists its parked servers with the end of each one's paid hour, and rebuilds a bound warm runner on its own server only", async () => {
    const s = await scene();
    await s.driver.accept(request("a-1"), within());
    await s.driver.accept(request("b-1"), within());
    const [a, b] = (await s.state()).servers;
    await s.driver.teardown("a-1", within());
    await s.driver.teardown("b-1", within());
    const parked = await s.driver.parked!("small");
    expect(parked.map((p) => p.server).sort()).toEqual([a!.id, b!.id].sort());
    // Its hour is Hetzner's: from the server's `created` (whole seconds) to an hour on.
    for (const p of parked) expect(Math.abs(p.paidUntil - (a!.createdAt + HOUR))).toBeLessThan(1_000);
    expect(await s.driver.parked!("other")).toEqual([]);

    expect(await s.driver.accept(bound("w-1", b!.id), within())).toBe("pending");
    const after = (await s.state()).servers;
    expect(after.find((v) => v.id === b!.id)).toMatchObject({ rebuilds: 1 });
    expect(after.find((v) => v.id === a!.id)).toMatchObject({ rebuilds: 0 });
    expect(bootOf(after.find((v) => v.id === b!.id)!.userData)!.url).toBe("https://dispatch.example.org/v1/assignments/w-1/bootstrap");
    expect((await s.driver.parked!("small")).map((p) => p.server)).toEqual([a!.id]);
  });

  it("a bound warm runner whose server a job took meanwhile is unneeded: no create, its note gone; near miss: a job's runner creates", async () => {
    const s = await scene();
    await s.driver.accept(request("c-1"), within());
    const [c] = (await s.state()).servers;
    await s.driver.teardown("c-1", within());
    // A job's runner takes the parked server first.
    expect(await s.driver.accept(request("d-1"), within())).toBe("pending");
    const before = await kinds(s);
    const err = await failure(s.driver.accept(bound("w-2", c!.id), within()));
    expect(err).toBeInstanceOf(WorkloadUnneeded);
    expect(await kinds(s)).toEqual(before);
    expect(await createNotes(s.stores.kv).get("pod", "w-2")).toBeUndefined();
    // The next pass of it is unneeded again, and still asks Hetzner nothing.
    expect(await failure(s.driver.accept(bound("w-2", c!.id), within()))).toBeInstanceOf(WorkloadUnneeded);
    expect(await kinds(s)).toEqual(before);
    // A job's runner in the same state (nothing parked) gets a new server.
    expect(await s.driver.accept(request("e-1"), within())).toBe("pending");
    expect((await kinds(s)).slice(before.length)).toEqual(["POST /servers"]);
  });

  it("within its pool's warmUntil of the hour's end a finished server is deleted, not parked; just past it, parked", async () => {
    const s = await scene();
    await s.driver.accept(request("f-1"), within());
    await s.driver.accept(request("g-1"), within());
    const [f, g] = (await s.state()).servers;
    s.clock.t = f!.createdAt + HOUR - WARM_UNTIL;
    await s.driver.teardown("f-1", within());
    s.clock.t = g!.createdAt + HOUR - WARM_UNTIL - 1_000;
    await s.driver.teardown("g-1", within());
    const state = await s.state();
    expect(state.servers.map((v) => v.id)).toEqual([g!.id]);
    expect((await s.driver.parked!("small")).map((p) => p.server)).toEqual([g!.id]);
  });
});
