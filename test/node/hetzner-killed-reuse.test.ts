// Warm by reuse at the hetzner driver with the Worker killed at each of its awaits: the accept of a
// warm runner bound to a parked server (assignment.reuse), cut before a call or after it with its
// answer lost, then the pass after; alone, and with a job's accept between the two that may take
// the server first. Whatever was cut: the bound runner never creates a server, the parked server
// can boot one runner only (the warm one's or the job's, with its own bootstrap, never the last
// job's), a server taken is off the parked list, and the sweep leaves nothing once all have ended.
import { describe, expect, it } from "vitest";
import { WorkloadUnneeded, type RunnerRequest } from "../../src/domain/backend.ts";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { bootOf } from "../../scripts/simulate-hetzner.mjs";
import { type HetznerScene, keptScenes, vmRequest } from "../harness/hetzner.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { afterSweep, bootableFor, bootsFor, callsOf, killable, liveBootstraps, MODES, within } from "../harness/hetzner-kill.ts";

const HOUR = 3_600_000;
const pool = { name: "small", reuse: "rebuild" as const, warmUntil: 4 * 60_000 };
const request = (id: string) => vmRequest(id, pool);
/** A warm runner of the pool bound to parked server `server`. */
const bound = (id: string, server: number): RunnerRequest => {
  const r = request(id);
  return { ...r, assignment: { ...r.assignment, warm: true, reuse: { server } } };
};
const { scenes } = keptScenes();

/** A server parked for the pool by job p-1's end: its id. */
async function park(s: HetznerScene): Promise<number> {
  await s.driver.accept(request("p-1"), within());
  await s.driver.teardown("p-1", within());
  return (await createNotes(s.stores.kv).parked("pod"))[0]!.value.serverId;
}

/** The pass after, for the bound runner: "pending", or "unneeded" once its server went to a job (a retried BackendError is tried again). */
async function boundAgain(s: HetznerScene, req: RunnerRequest): Promise<"pending" | "unneeded"> {
  for (let i = 0; i < 3; i++) {
    try {
      expect(await s.driver.accept(req, within())).toBe("pending");
      return "pending";
    } catch (err) {
      if (err instanceof WorkloadUnneeded) return "unneeded";
    }
  }
  throw new Error("no answer in three passes");
}

/** Creates asked for assignment `id` (a server's name carries its label). */
const createsFor = async (s: HetznerScene, id: string) =>
  (await s.state()).requests.filter((r) => r.method === "POST" && r.path.endsWith("/servers") && r.body.includes(`"gdr-assignment":"${id}"`)).length;

describe("a warm runner by reuse, the Worker killed at any await of its accept", () => {
  it("alone: the pass after rebuilds its own server for it, once bootable, never a create", async () => {
    const calls = await callsOf(
      scenes,
      async (s) => void (await park(s)),
      async (s) => s.driver.accept(bound("w-1", (await createNotes(s.stores.kv).parked("pod"))[0]!.value.serverId), within()),
    );
    expect(calls).toBeGreaterThanOrEqual(6);
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable(scenes);
        const server = await park(s);
        const last = (await s.state()).servers[0]!;
        await run(at, mode, () => s.driver.accept(bound("w-1", server), within()));
        expect(await boundAgain(s, bound("w-1", server)), `${mode} ${at}`).toBe("pending");
        expect(await createsFor(s, "w-1"), `${mode} ${at}`).toBe(0);

        expect(await bootableFor(s, "w-1"), `${mode} ${at}`).toEqual([server]);
        expect(await liveBootstraps(s, "w-1"), `${mode} ${at}`).toBe(1);
        // Taken: off the parked list, so no job's accept is handed it too.
        expect(await createNotes(s.stores.kv).parked("pod"), `${mode} ${at}`).toEqual([]);
        const servers = await afterSweep(s, ["w-1"], ["p-1"]);
        expect(
          servers.map((v) => v.id),
          `${mode} ${at}`,
        ).toEqual([server]);
        // Its note names the server: a take its pass left (cut before its drop) is gone after the sweep.
        expect(await createNotes(s.stores.kv).parked("pod", undefined, true), `${mode} ${at}`).toEqual([]);
        await bootsFor(s, servers[0]!.userData, "w-1");
        // The last job's token opens nothing.
        expect(await s.stores.bootstraps.take("w-1", bootOf(last.userData)!.token)).toBeUndefined();
        // Unused, it goes: its teardown parks it (or deletes it), and the sweep before the next hour deletes it.
        await s.driver.teardown("w-1", within());
        s.clock.t = last.createdAt + HOUR - 60_000;
        await s.sweep(
          new Map([
            ["w-1", { ended: true }],
            ["p-1", { ended: true }],
          ]),
        );
        expect((await s.state()).servers, `${mode} ${at}`).toEqual([]);
      }
    }
  });

  it("a job's accept between the cut and the pass after: the server boots one of them; the warm runner is unneeded rather than create one", async () => {
    const calls = await callsOf(
      scenes,
      async (s) => void (await park(s)),
      async (s) => s.driver.accept(bound("w-1", (await createNotes(s.stores.kv).parked("pod"))[0]!.value.serverId), within()),
    );
    const outcomes = new Set<string>();
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable(scenes);
        const server = await park(s);
        await run(at, mode, () => s.driver.accept(bound("w-1", server), within()));
        expect(await s.driver.accept(request("j-1"), within()), `${mode} ${at}`).toBe("pending");
        const warm = await boundAgain(s, bound("w-1", server));
        outcomes.add(warm);
        expect(await createsFor(s, "w-1"), `${mode} ${at}`).toBe(0);
        // The parked server boots exactly one of them; the job has one server either way.
        const forWarm = await bootableFor(s, "w-1");
        const forJob = await bootableFor(s, "j-1");
        expect(forJob, `${mode} ${at}`).toHaveLength(1);
        expect(
          [...forWarm, ...forJob].filter((id) => id === server),
          `${mode} ${at}`,
        ).toHaveLength(1);
        expect(forWarm, `${mode} ${at}`).toEqual(warm === "pending" ? [server] : []);
        expect(await liveBootstraps(s, "w-1"), `${mode} ${at}`).toBe(warm === "pending" ? 1 : 0);
        expect(await createNotes(s.stores.kv).parked("pod"), `${mode} ${at}`).toEqual([]);
        const live = warm === "pending" ? ["w-1", "j-1"] : ["j-1"];
        expect(await afterSweep(s, live, ["p-1", ...(warm === "pending" ? [] : ["w-1"])]), `${mode} ${at}`).toHaveLength(live.length);
        await bootsFor(s, (await s.state()).servers.find((v) => v.id === forJob[0])!.userData, "j-1");
        // All ended: the sweep before the next paid hour leaves nothing.
        for (const id of live) await s.driver.teardown(id, within());
        s.clock.t += HOUR - 60_000;
        await s.sweep(new Map(["w-1", "j-1", "p-1"].map((id) => [id, { ended: true }] as const)));
        expect((await s.state()).servers, `${mode} ${at}`).toEqual([]);
      }
    }
    // Both happen: a cut before the take leaves the server to the job; one after it, to the warm runner.
    expect([...outcomes].sort()).toEqual(["pending", "unneeded"]);
  });

  it("a take whose pass never came back: the sweep leaves the server alone for a minute, then offers it again; a take its note names goes off the list", async () => {
    const { s } = await killable(scenes);
    const server = await park(s);
    const notes = createNotes(s.stores.kv);
    const kinds = async () => (await s.state()).requests.filter((r) => r.method !== "GET" && !r.path.includes("_control")).length;
    // Past the grace of an unknown server: only its take keeps it.
    s.clock.t += ORPHAN_GRACE_MS + 60_000;
    // A pass took it for w-9 and was killed before its note named the server.
    const [read] = await notes.parked("pod");
    expect(await notes.take(read!, "w-9", s.clock.t)).not.toBeNull();
    expect(await notes.parked("pod")).toEqual([]);
    // Near miss: its last job ended, and nothing names it; still it is not deleted while its take is fresh.
    s.clock.t += 10_000;
    await s.sweep(new Map([["p-1", { ended: true }]]));
    expect((await s.state()).servers.map((v) => v.id)).toEqual([server]);
    // A minute on, its taker has not come back: offered again (not deleted), and a job's accept rebuilds it.
    s.clock.t += 60_000;
    await s.sweep(new Map([["p-1", { ended: true }]]));
    expect((await s.state()).servers.map((v) => v.id)).toEqual([server]);
    expect((await notes.parked("pod")).map((p) => p.value.serverId)).toEqual([server]);
    const before = await kinds();
    expect(await s.driver.accept(request("j-2"), within())).toBe("pending");
    expect((await s.state()).requests.slice(-1)[0]!.path).toBe(`/servers/${server}/actions/rebuild`);
    expect((await kinds()) - before).toBe(1);
    // Its taker's late pass: no server of its own (the take is no longer its).
    expect(await boundAgain(s, bound("w-9", server))).toBe("unneeded");
    expect(await createsFor(s, "w-9")).toBe(0);

    // A take whose note names the server (its taker cut short before the drop): the sweep takes it off the list, and keeps the server.
    await s.driver.teardown("j-2", within());
    const [again] = await notes.parked("pod");
    expect(await notes.take(again!, "w-10", s.clock.t)).not.toBeNull();
    await notes.put("pod", "w-10", { id: "w-10", serverId: server, createdAt: s.clock.t });
    await s.sweep(new Map([["w-10", { ended: false }]]));
    expect(await notes.parked("pod", undefined, true)).toEqual([]);
    expect((await s.state()).servers.map((v) => v.id)).toEqual([server]);
  });

  it("a sweep's offer again of a stale take loses to its taker coming back between the sweep's read and its write", async () => {
    const { s } = await killable(scenes);
    const server = await park(s);
    const notes = createNotes(s.stores.kv);
    const [read] = await notes.parked("pod");
    expect(await notes.take(read!, "w-11", s.clock.t)).not.toBeNull();
    // The sweep reads the take, stale; meanwhile its taker's pass comes back and takes it again.
    const [stale] = await notes.parked("pod", undefined, true);
    expect(await notes.take(stale!, "w-11", s.clock.t + 70_000)).not.toBeNull();
    expect(await notes.untake(stale!)).toBe(false);
    // Still its taker's: offered to nobody else.
    expect(await notes.parked("pod")).toEqual([]);
    expect((await notes.parked("pod", undefined, true)).map((p) => [p.value.serverId, p.value.takenBy])).toEqual([[server, "w-11"]]);
  });
});
