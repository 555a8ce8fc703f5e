// The hetzner driver with the Worker killed at each of its awaits (a deploy, an evicted isolate):
// before a call is made, or after it with its answer lost. No guarantee may rest on the next line
// running: the pass after finds what the cut-short one left, and the sweep the rest. Each case ends
// with one server for the job, booting that job's own bootstrap, and nothing left once it ends.
import { describe, expect, it } from "vitest";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { bootOf } from "../../scripts/simulate-hetzner.mjs";
import { hetznerScene, type HetznerScene, keptScenes, vmRequest } from "../harness/hetzner.ts";
import {
  acceptAgain,
  afterSweep,
  bootableFor,
  bootsFor,
  callsOf as callsOfIn,
  Killed,
  killable as kill,
  liveBootstraps,
  MODES,
  within,
} from "../harness/hetzner-kill.ts";

const HOUR = 3_600_000;
const request = (id: string) => vmRequest(id, { name: "small", reuse: "rebuild" });
const plain = (id: string) => vmRequest(id);
const { scenes } = keptScenes();
const killable = () => kill(scenes);
const callsOf = (setup: (s: HetznerScene) => Promise<void>, fn: (s: HetznerScene) => Promise<unknown>) => callsOfIn(scenes, setup, fn);

describe("the hetzner driver killed at any await", () => {
  it("a create: the pass after makes or adopts the one server, which boots the job's own bootstrap; its end leaves nothing", async () => {
    const calls = await callsOf(
      async () => undefined,
      (s) => s.driver.accept(plain("c-1"), within()),
    );
    expect(calls).toBeGreaterThanOrEqual(4);
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable();
        await run(at, mode, () => s.driver.accept(plain("c-1"), within()));
        expect(await acceptAgain(s, plain("c-1")), `${mode} ${at}`).toBe("pending");
        expect(await bootableFor(s, "c-1"), `${mode} ${at}`).toHaveLength(1);
        // A bootstrap of a create that made nothing was revoked before the next was issued.
        expect(await liveBootstraps(s, "c-1"), `${mode} ${at}`).toBe(1);
        const servers = await afterSweep(s, ["c-1"], []);
        expect(servers, `${mode} ${at}`).toHaveLength(1);
        await bootsFor(s, servers[0]!.userData, "c-1");
        await s.driver.teardown("c-1", within());
        expect(await afterSweep(s, [], ["c-1"]), `${mode} ${at}`).toEqual([]);
      }
    }
  });

  it("a create whose note was never written, its job claimed before any later pass: the sweep adopts its server (never deletes it under the job), which goes when the assignment ends", async () => {
    const calls = await callsOf(
      async () => undefined,
      (s) => s.driver.accept(plain("c-1"), within()),
    );
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable();
        await run(at, mode, () => s.driver.accept(plain("c-1"), within()));
        // No pass after: a runner claimed the job, and a claimed job never asks the driver again.
        const made = (await s.state()).servers.map((v) => v.id);
        expect(await afterSweep(s, ["c-1"], []), `${mode} ${at}`).toHaveLength(made.length);
        if (made.length) expect((await createNotes(s.stores.kv).get("pod", "c-1"))?.serverId, `${mode} ${at}`).toBe(made[0]);
        expect(await afterSweep(s, [], ["c-1"]), `${mode} ${at}`).toEqual([]);
      }
    }
  });

  it("a create whose answer was lost, then a server parked for the pool: the pass after adopts its own create's server, and only the noted server can boot the job", async () => {
    const parkOne = async (s: HetznerScene) => {
      await s.driver.accept(request("p-1"), within());
      await s.driver.teardown("p-1", within());
    };
    const calls = await callsOf(
      async () => undefined,
      (s) => s.driver.accept(request("b-1"), within()),
    );
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable();
        await run(at, mode, () => s.driver.accept(request("b-1"), within()));
        const made = (await s.state()).servers.map((v) => v.id);
        await parkOne(s);
        expect(await acceptAgain(s, request("b-1")), `${mode} ${at}`).toBe("pending");
        const noted = (await createNotes(s.stores.kv).get("pod", "b-1"))?.serverId;
        expect(await bootableFor(s, "b-1"), `${mode} ${at}`).toEqual([noted]);
        expect(await liveBootstraps(s, "b-1"), `${mode} ${at}`).toBe(1);
        // The server its create made is the one kept (adopted), and the parked one stays parked.
        if (made.length) expect(noted, `${mode} ${at}`).toBe(made[0]);
        if (made.length) expect(await createNotes(s.stores.kv).parked("pod"), `${mode} ${at}`).toHaveLength(1);
        const servers = await afterSweep(s, ["b-1"], ["p-1"]);
        expect(
          servers.map((v) => v.id),
          `${mode} ${at}`,
        ).toContain(noted);
        await bootsFor(s, servers.find((v) => v.id === noted)!.userData, "b-1");
      }
    }
  });

  it("a parked server's take and rebuild: the pass after and the sweep leave one server, booting the new job's bootstrap, never the last job's", async () => {
    const park = async (s: HetznerScene) => {
      await s.driver.accept(request("p-1"), within());
      await s.driver.teardown("p-1", within());
    };
    const calls = await callsOf(park, (s) => s.driver.accept(request("b-1"), within()));
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable();
        await park(s);
        const parked = (await s.state()).servers[0]!;
        await run(at, mode, () => s.driver.accept(request("b-1"), within()));
        expect(await acceptAgain(s, request("b-1")), `${mode} ${at}`).toBe("pending");
        // Before any sweep: one server at most can start the job's runner.
        expect(await bootableFor(s, "b-1"), `${mode} ${at}`).toHaveLength(1);
        const servers = await afterSweep(s, ["b-1"], ["p-1"]);
        expect(servers, `${mode} ${at}`).toHaveLength(1);
        await bootsFor(s, servers[0]!.userData, "b-1");
        // The last job's token opens nothing, whatever was cut.
        expect(await s.stores.bootstraps.take("b-1", bootOf(parked.userData)!.token)).toBeUndefined();
        await s.driver.teardown("b-1", within());
        // Parked again (or deleted): the sweep before its next paid hour leaves nothing.
        s.clock.t = parked.createdAt + HOUR - 60_000;
        await s.sweep(
          new Map([
            ["b-1", { ended: true }],
            ["p-1", { ended: true }],
          ]),
        );
        expect((await s.state()).servers, `${mode} ${at}`).toEqual([]);
      }
    }
  });

  it("a rebuild whose answer was lost, the server booted meanwhile: the pass after keeps it (no second rebuild)", async () => {
    const cut = { armed: false };
    // Cut right after the rebuild call: its answer lost, the note still saying it was asked.
    const s = await hetznerScene(
      {},
      {
        fetch: async (input, init) => {
          const res = await fetch(input, init);
          if (cut.armed && String(input instanceof Request ? input.url : input).endsWith("/actions/rebuild")) throw new Killed("killed after the rebuild");
          return res;
        },
      },
    );
    scenes.push(s);
    s.clock.t = Date.now();
    await s.driver.accept(request("p-1"), within());
    await s.driver.teardown("p-1", within());
    cut.armed = true;
    await expect(s.driver.accept(request("b-1"), within())).rejects.toThrow();
    cut.armed = false;
    const rebuilds = async () => (await s.state()).requests.filter((r) => r.path.endsWith("/actions/rebuild")).length;
    expect(await rebuilds()).toBe(1);
    expect((await createNotes(s.stores.kv).get("pod", "b-1"))?.rebuilding).toBeDefined();
    // The server boots and takes its bootstrap before the pass after.
    await bootsFor(s, (await s.state()).servers[0]!.userData, "b-1");
    expect(await acceptAgain(s, request("b-1"))).toBe("pending");
    expect(await rebuilds()).toBe(1);
    expect((await createNotes(s.stores.kv).get("pod", "b-1"))?.rebuilding).toBeUndefined();
  });

  it("a parking teardown cut short and retried, then retried again after another job took the server: parked once, never ended under that job", async () => {
    const setup = async (s: HetznerScene) => void (await s.driver.accept(request("p-1"), within()));
    const calls = await callsOf(setup, (s) => s.driver.teardown("p-1", within()));
    for (const mode of MODES) {
      for (let at = 1; at <= calls; at++) {
        const { s, run } = await killable();
        await setup(s);
        await run(at, mode, () => s.driver.teardown("p-1", within()));
        await s.driver.teardown("p-1", within());
        const notes = createNotes(s.stores.kv);
        const [parked] = await notes.parked("pod");
        expect(await notes.parked("pod"), `${mode} ${at}`).toHaveLength(1);
        // A parked server runs no assignment, and its last job's note is gone.
        expect(await notes.runs("pod", parked!.value.serverId)).toBeUndefined();
        expect(await notes.get("pod", "p-1")).toBeUndefined();
        expect(await s.driver.accept(request("b-1"), within())).toBe("pending");
        // A stale retry of the first job's teardown: the server is the second job's now.
        await s.driver.teardown("p-1", within());
        const servers = (await s.state()).servers;
        expect(servers, `${mode} ${at}`).toHaveLength(1);
        expect(await notes.parked("pod"), `${mode} ${at}`).toEqual([]);
        expect((await notes.get("pod", "b-1"))?.serverId).toBe(servers[0]!.id);
        expect(await afterSweep(s, ["b-1"], ["p-1"])).toHaveLength(1);
        await bootsFor(s, servers[0]!.userData, "b-1");
      }
    }
  });
});
