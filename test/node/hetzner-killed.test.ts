// The hetzner driver with the Worker killed at each of its awaits (a deploy, an evicted isolate):
// before a call is made, or after it with its answer lost. No guarantee may rest on the next line
// running: the pass after finds what the cut-short one left, and the sweep the rest. Each case ends
// with one server for the job, booting that job's own bootstrap, and nothing left once it ends.
import type { KV } from "@nats-io/kv";
import { afterAll, describe, expect, it } from "vitest";
import { BackendError } from "../../src/domain/backend.ts";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { bootOf, readLaunch } from "../../scripts/simulate-hetzner.mjs";
import { aroundKv, hetznerScene, vmRequest, type HetznerScene } from "../harness/hetzner.ts";

const HOUR = 3_600_000;
const within = () => AbortSignal.timeout(3_000);
const request = (id: string) => vmRequest(id, { name: "small", reuse: "rebuild" });
const plain = (id: string) => vmRequest(id);
class Killed extends Error {}
type Mode = "before" | "after";
/** The records bucket's calls the driver makes (each an await a deploy can cut). */
const KV_CALLS = new Set(["get", "put", "create", "update", "delete", "purge", "keys"]);

/** A scene whose fetch and records-bucket calls are numbered; the `at`-th is cut, before it is made or after. */
async function killable() {
  const cut = { n: 0, at: Infinity, mode: "before" as Mode, fired: false };
  // The driver wraps what its fetch throws (a BackendError): the cut is known by `fired`.
  const step = async <T>(call: () => Promise<T>): Promise<T> => {
    const n = ++cut.n;
    if (n === cut.at && cut.mode === "before") throw ((cut.fired = true), new Killed(`killed before call ${n}`));
    const v = await call();
    if (n === cut.at && cut.mode === "after") throw ((cut.fired = true), new Killed(`killed after call ${n}`));
    if (cut.fired) throw new Killed(`call ${n} after the kill`);
    return v;
  };
  const kv = (real: KV) => aroundKv(real, KV_CALLS, step);
  const s = await hetznerScene({}, { fetch: (input, init) => step(() => fetch(input, init)), kv });
  s.clock.t = Date.now();
  scenes.push(s);
  /** Runs `fn` with call `at` cut; the count of calls it made when nothing was cut. */
  const run = async (at: number, mode: Mode, fn: () => Promise<unknown>) => {
    Object.assign(cut, { n: 0, at, mode, fired: false });
    try {
      await fn();
    } catch (err) {
      if (!cut.fired) throw err;
    }
    const n = cut.n;
    Object.assign(cut, { at: Infinity, fired: false });
    return n;
  };
  return { s, run };
}

const scenes: HetznerScene[] = [];
afterAll(async () => {
  for (const s of scenes.splice(0)) await s.close();
});

/** The pass after: the dispatcher accepts again until the driver answers (a BackendError is its usual retry). */
async function acceptAgain(s: HetznerScene, req: ReturnType<typeof vmRequest>) {
  for (let i = 0; i < 3; i++) {
    try {
      return await s.driver.accept(req, within());
    } catch (err) {
      if (!(err instanceof BackendError)) throw err;
    }
  }
  throw new Error("no answer in three passes");
}

/** The live servers, after a sweep past the grace that knows `live` running and `ended` ended. */
async function afterSweep(s: HetznerScene, live: string[], ended: string[]) {
  const records = new Map<string, { ended: boolean }>([
    ...live.map((id) => [id, { ended: false }] as const),
    ...ended.map((id) => [id, { ended: true }] as const),
  ]);
  const t = s.clock.t;
  s.clock.t = t + ORPHAN_GRACE_MS + 60_000;
  await s.sweep(records);
  s.clock.t = t;
  return (await s.state()).servers;
}

/** The server boots `id`'s runner: the bootstrap in its user_data opens `id`'s launch, once. */
async function bootsFor(s: HetznerScene, userData: string, id: string) {
  const boot = bootOf(userData)!;
  expect(boot.url).toBe(`https://dispatch.example.org/v1/assignments/${id}/bootstrap`);
  const launch = await s.stores.bootstraps.take<{ script: string }>(id, boot.token);
  expect(readLaunch(launch!.script).files[".runner"]).toContain(`identity-of-${id}`);
}

/** The servers whose user_data holds a bootstrap for `id` that is still there to take: never more than one. */
async function bootableFor(s: HetznerScene, id: string) {
  const found = [];
  for (const v of (await s.state()).servers) {
    const token = bootOf(v.userData)?.token;
    const entry = token ? await s.stores.kv.get(await s.stores.bootstraps.keyOf(token)) : null;
    if (entry?.operation === "PUT" && entry.json<{ id: string; spent?: true }>().id === id && !entry.json<{ spent?: true }>().spent) found.push(v.id);
  }
  return found;
}

/** Bootstraps issued for `id` that could still be taken (not spent, revoked or expired): only the noted server's may be. */
async function liveBootstraps(s: HetznerScene, id: string) {
  let n = 0;
  for await (const key of await s.stores.kv.keys("boot.>")) {
    const e = await s.stores.kv.get(key);
    if (e?.operation === "PUT" && e.length && e.json<{ id: string; spent?: true }>().id === id && !e.json<{ spent?: true }>().spent) n++;
  }
  return n;
}

/** How many calls a clean run of `fn` makes on a fresh scene set up by `setup`. */
async function callsOf(setup: (s: HetznerScene) => Promise<void>, fn: (s: HetznerScene) => Promise<unknown>) {
  const { s, run } = await killable();
  await setup(s);
  return run(Infinity, "before", () => fn(s));
}

const MODES: Mode[] = ["before", "after"];

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
