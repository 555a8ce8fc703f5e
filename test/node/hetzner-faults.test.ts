// The hetzner driver where Hetzner says no, or says nothing: each fault ends with nothing lost
// (the assignment gets its server), nothing doubled (one server per assignment) and nothing left
// running (teardown and the sweep leave 0 servers).
import { describe, expect, it } from "vitest";
import { BackendError } from "../../src/domain/backend.ts";
import { FULL_RECHECK_MS, ProjectFull, STATUS_READ_AFTER_MS } from "../../src/backends/hetzner/driver.ts";
import { RateBudgetExhausted } from "../../src/backends/hetzner/client.ts";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { serverName } from "../../src/backends/hetzner/server-body.ts";
import { deploymentInstance } from "../../src/app/select-backend.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";
import { aroundKv, failure, hetznerScene, type HetznerScene, keptScenes, TEMPLATE, vmRequest } from "../harness/hetzner.ts";

const { scenes, scene } = keptScenes();

const request = vmRequest;
const within = () => AbortSignal.timeout(3_000);

/** This driver's deployment instance, as its labels carry it: read from a server it made in a scene of the same environment. */
async function instanceOf(s: HetznerScene) {
  return { instance: deploymentInstance(s.config.stream, s.config.publicUrl) };
}

/** A server made straight through the API (another deployment's, or one of ours whose note is lost). */
async function createdBehindOurBack(s: HetznerScene, idOrName: string, labels: Record<string, string>) {
  const name = idOrName.startsWith("gdr-") ? idOrName : (await objectNames("gdr", idOrName)).name;
  const res = await fetch(`${s.base}/servers`, {
    method: "POST",
    headers: { authorization: `Bearer ${FAKE_HCLOUD_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ ...TEMPLATE, name, labels }),
  });
  expect(res.status).toBe(201);
}

describe("hetzner driver faults", () => {
  it("a create whose answer was lost: the pass after adopts the server that carries its bootstrap, never a second one, and tears it down by its note", async () => {
    const lost = { armed: true };
    const s = await hetznerScene(
      {},
      {
        fetch: async (input, init) => {
          const res = await fetch(input, init);
          if (lost.armed && init?.method === "POST" && new URL(String(input instanceof Request ? input.url : input)).pathname.endsWith("/servers"))
            throw ((lost.armed = false), new Error("the answer was lost"));
          return res;
        },
      },
    );
    scenes.push(s);
    await expect(s.driver.accept(request("u-1"), within())).rejects.toThrow();
    expect(await s.driver.accept(request("u-1"), within())).toBe("pending");
    expect(await s.driver.accept(request("u-1"), within())).toBe("pending");
    const st = await s.state();
    expect(st.servers).toHaveLength(1);
    // One create, then one look by name: the server's bootstrap mark is the noted create's.
    expect(st.requests.filter((r) => r.method === "POST")).toHaveLength(1);
    expect(st.requests.filter((r) => r.method === "GET" && r.query.includes("name="))).toHaveLength(1);
    await s.driver.teardown("u-1", within());
    expect((await s.state()).servers).toHaveLength(0);
  });

  it("a server of the assignment's name that is not this deployment's (a name taken in the project) is never adopted, parked or deleted", async () => {
    const s = await scene();
    const name = await serverName("gdr", "n-1", (await instanceOf(s)).instance, "pod");
    const foreign = { "managed-by": "gitea-edge-dispatcher", "gdr-instance": "someone-else", "gdr-backend": "pod", "gdr-assignment": "n-1" };
    await createdBehindOurBack(s, name, foreign);
    await expect(s.driver.accept(request("n-1"), within())).rejects.toThrow(/name is taken/);
    await s.driver.teardown("n-1", within());
    s.clock.t += 2 * ORPHAN_GRACE_MS;
    await s.sweep(new Map([["n-1", { ended: true }]]));
    expect((await s.state()).servers.map((v) => v.labels)).toEqual([foreign]);
  });

  it("two deployments in one project whose job ids overlap: each makes, sweeps and tears down its own server, never the other's", async () => {
    const prod = await scene();
    const staging = await hetznerScene({ PUBLIC_URL: "https://staging.example.org" }, { base: prod.base });
    scenes.push(staging);
    for (const d of [prod, staging]) expect(await d.driver.accept(request("gitea-7-1"), within())).toBe("pending");
    const servers = (await prod.state()).servers;
    expect(servers).toHaveLength(2);
    expect(new Set(servers.map((v) => v.name)).size).toBe(2);
    expect(new Set(servers.map((v) => v.labels["gdr-instance"])).size).toBe(2);
    // Production's job ended; staging's runs. Production's teardown, retried without its note, and its sweep leave staging's alone.
    await prod.driver.teardown("gitea-7-1", within());
    await prod.driver.teardown("gitea-7-1", within());
    prod.clock.t += 2 * ORPHAN_GRACE_MS;
    await prod.sweep(new Map([["gitea-7-1", { ended: true }]]));
    const left = (await prod.state()).servers;
    expect(left.map((v) => v.labels["gdr-instance"])).toEqual([deploymentInstance(staging.config.stream, staging.config.publicUrl)]);
    // Staging's next pass still finds its own server by its note.
    expect(await staging.driver.accept(request("gitea-7-1"), within())).toBe("pending");
    expect((await prod.state()).servers).toHaveLength(1);
  });

  it("a teardown and a sweep that both judge a server done: it is deleted once, whichever claims its note first, and a teardown retried after adds nothing", async () => {
    const s = await scene();
    for (let round = 0; round < 12; round++) {
      const id = `twice-${round}`;
      await s.driver.accept(request(id), within());
      const [server] = (await s.state()).servers;
      const ended = new Map([[id, { ended: true }]]);
      const racers = [() => s.driver.teardown(id, within()), () => s.sweep(ended)];
      if (round % 2) racers.reverse();
      await Promise.allSettled(racers.map((run) => run()));
      await s.driver.teardown(id, within()).catch(() => undefined);
      await s.sweep(ended);
      const deletes = (await s.state()).requests.filter((r) => r.method === "DELETE" && r.path.endsWith(`/${server!.id}`));
      if (deletes.length !== 1) console.log(JSON.stringify((await s.state()).requests.slice(-12).map((r) => `${r.method} ${r.path}${r.query}`)));
      expect(deletes, `round ${round}`).toHaveLength(1);
      expect((await s.state()).servers).toEqual([]);
    }
  });

  describe("a teardown and a sweep interleaved at each read: the server is deleted once", () => {
    /** A scene whose `at`-th batch read (readMany), or first note read by kv.get, runs `hook` before it answers. */
    async function interleaved() {
      const when = { readMany: 0, get: false, hook: undefined as (() => Promise<unknown>) | undefined };
      const run = async () => {
        const h = when.hook;
        when.hook = undefined;
        if (h) await h();
      };
      let reads = 0;
      const s = await hetznerScene(
        {},
        {
          readMany: (real) => async (keys) => {
            const r = await real(keys);
            if (++reads === when.readMany) await run();
            return r;
          },
          kv: (real) =>
            aroundKv(real, new Set(["get"]), async (call) => {
              const r = await call();
              if (when.get) {
                when.get = false;
                await run();
              }
              return r;
            }),
        },
      );
      scenes.push(s);
      await s.driver.accept(request("i-1"), within());
      const deletes = async () => (await s.state()).requests.filter((r) => r.method === "DELETE").length;
      const ended = new Map([["i-1", { ended: true }]]);
      return { s, when, deletes, ended, reset: () => (reads = 0) };
    }

    it("the sweep read the note, then a teardown claimed and deleted: the sweep's claim fails", async () => {
      const { s, when, deletes, ended, reset } = await interleaved();
      reset();
      Object.assign(when, { readMany: 2, hook: () => s.driver.teardown("i-1", within()) });
      await s.sweep(ended);
      expect(await deletes()).toBe(1);
    });

    it("the sweep read the server's index before a teardown ended it and the note after: its index read again spares it", async () => {
      const { s, when, deletes, ended, reset } = await interleaved();
      reset();
      Object.assign(when, { readMany: 1, hook: () => s.driver.teardown("i-1", within()) });
      await s.sweep(ended);
      expect(await deletes()).toBe(1);
    });

    it("a teardown read the note, then the sweep claimed and deleted: the teardown's claim fails", async () => {
      const { s, when, deletes, ended } = await interleaved();
      Object.assign(when, { get: true, hook: () => s.sweep(ended) });
      await s.driver.teardown("i-1", within()).catch(() => undefined);
      await s.driver.teardown("i-1", within()).catch(() => undefined);
      expect(await deletes()).toBe(1);
    });
  });

  it("the first candidate unavailable, the second full of placements: the third is made in the same pass", async () => {
    const s = await scene();
    await s.ctl("mode", { unavailable: [{ server_type: "cx22", location: "fsn1" }], placementError: [{ location: "nbg1" }] });
    const candidates = [
      { server_type: "cx22", location: "fsn1" },
      { server_type: "cx22", location: "nbg1" },
      { server_type: "cx32", location: "hel1" },
    ];
    expect(await s.driver.accept(request("c-1", { name: "small", candidates }), within())).toBe("pending");
    const st = await s.state();
    expect(st.servers.map((v) => [v.server_type, v.location])).toEqual([["cx32", "hel1"]]);
    expect(st.servers[0]!.labels["gdr-pool"]).toBe("small");
    // Every candidate without room: a retry, and nothing made.
    await s.ctl("mode", { unavailable: [{ server_type: "cx22", location: "fsn1" }, { server_type: "cx32" }], placementError: [{ location: "nbg1" }] });
    const err = await failure(s.driver.accept(request("c-2", { name: "small", candidates }), within()));
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toMatch(/no candidate has room \(resource_unavailable\)/);
    expect((await s.state()).servers).toHaveLength(1);
  });

  it("the project's server limit is a full backend: ProjectFull, no server, and the job gets one once there is room", async () => {
    const s = await scene();
    await s.ctl("mode", { serverLimit: 0 });
    const err = await failure(s.driver.accept(request("l-1"), within()));
    expect(err).toBeInstanceOf(ProjectFull);
    expect((err as ProjectFull).full).toBe(true);
    expect((await s.state()).servers).toHaveLength(0);
    expect(await s.stores.figures.get("pod")).toEqual({ swept: 0, fullTotal: 1, fullUntil: s.clock.t + FULL_RECHECK_MS });
    // No retry storm: while it is taken to be full, passes ask Hetzner nothing.
    const asked = (await s.state()).requests.length;
    await s.ctl("mode", { serverLimit: 5 });
    s.clock.t += FULL_RECHECK_MS - 1;
    expect(await failure(s.driver.accept(request("l-1"), within()))).toBeInstanceOf(ProjectFull);
    expect(await failure(s.driver.accept(request("l-2"), within()))).toBeInstanceOf(ProjectFull);
    expect((await s.state()).requests.length).toBe(asked);
    s.clock.t += 1;
    expect(await s.driver.accept(request("l-1"), within())).toBe("pending");
    expect((await s.state()).servers).toHaveLength(1);
  });

  it("429: no request until the budget says so (not even a status read), then the create lands once", async () => {
    const s = await scene();
    await s.ctl("mode", { rateRemaining: 0 });
    const err = await failure(s.driver.accept(request("r-1"), within()));
    expect(err).toBeInstanceOf(RateBudgetExhausted);
    const asked = (await s.state()).requests.length;
    // Before the refill: the budget answers, Hetzner is not asked.
    expect(await failure(s.driver.accept(request("r-1"), within()))).toBeInstanceOf(RateBudgetExhausted);
    expect((await s.state()).requests.length).toBe(asked);
    // Creates leave a few requests to deletes: the refill (one a second) must cover them first.
    s.clock.t += 7_000;
    await s.ctl("clock", { advanceMs: 7_000 });
    expect(await s.driver.accept(request("r-1"), within())).toBe("pending");
    expect((await s.state()).servers).toHaveLength(1);
  });

  it("a delete the budget holds back waits for its refill, within its call: the server goes, not to the retries", async () => {
    const s = await scene();
    s.clock.real = true;
    await s.driver.accept(request("t-1"), within());
    await s.ctl("mode", { rateRemaining: 0 });
    const started = Date.now();
    await s.driver.teardown("t-1", within());
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect((await s.state()).servers).toHaveLength(0);
  });

  it("a 5xx, then a hang: each a BackendError, and the next pass makes the one server", async () => {
    const s = await scene();
    await s.ctl("mode", { failFirst: 1 });
    expect(await failure(s.driver.accept(request("f-1"), within()))).toMatchObject({ name: "BackendError", status: 500 });
    await s.ctl("mode", { hangFirst: 1, hangMs: 1_000, failFirst: 0 });
    expect(((await failure(s.driver.accept(request("f-1"), AbortSignal.timeout(200)))) as Error).message).toMatch(/timed out/);
    expect(await s.driver.accept(request("f-1"), within())).toBe("pending");
    expect(await s.driver.accept(request("f-1"), within())).toBe("pending");
    expect((await s.state()).servers).toHaveLength(1);
  });

  it("a server that dies before its claim: deleted at its one status read, asked for again, one left", async () => {
    const s = await scene();
    await s.driver.accept(request("d-1"), within());
    await s.ctl("status", { status: "off" });
    // Before its status read is due, nothing is asked of Hetzner.
    const asked = (await s.state()).requests.length;
    expect(await s.driver.accept(request("d-1"), within())).toBe("pending");
    expect((await s.state()).requests.length).toBe(asked);
    s.clock.t += STATUS_READ_AFTER_MS + 1;
    expect(((await failure(s.driver.accept(request("d-1"), within()))) as Error).message).toMatch(/server off before the claim/);
    expect(await s.driver.accept(request("d-1"), within())).toBe("pending");
    const st = await s.state();
    expect(st.servers).toHaveLength(1);
    expect(st.deleted).toHaveLength(1);
  });

  it("a page that fails in the middle of the sweep deletes nothing; the next sweep deletes every orphan, and no server of another instance or backend", async () => {
    const s = await scene();
    const mine = { "managed-by": "gitea-edge-dispatcher", "gdr-instance": "", "gdr-backend": "pod" };
    // The instance label is the driver's: read it from a server it made.
    await s.driver.accept(request("keep-1"), within());
    mine["gdr-instance"] = (await s.state()).servers[0]!.labels["gdr-instance"]!;
    await s.ctl("clock", { advanceMs: -2 * ORPHAN_GRACE_MS });
    for (let i = 0; i < 60; i++) await createdBehindOurBack(s, `orphan-${i}`, { ...mine, "gdr-assignment": `orphan-${i}` });
    await createdBehindOurBack(s, "other-instance", { ...mine, "gdr-instance": "someone-else", "gdr-assignment": "other-instance" });
    await createdBehindOurBack(s, "other-backend", { ...mine, "gdr-backend": "big", "gdr-assignment": "other-backend" });
    await s.ctl("clock", { advanceMs: 2 * ORPHAN_GRACE_MS });
    s.clock.t = Date.now();
    await s.ctl("mode", { failCalls: [2] });
    await expect(s.sweep(new Map([["keep-1", { ended: false }]]))).rejects.toThrow(/500/);
    expect((await s.state()).servers).toHaveLength(63);
    await s.ctl("mode", { failCalls: [] });
    const swept = await s.sweep(new Map([["keep-1", { ended: false }]]));
    expect(swept.deleted).toBe(60);
    expect(await s.stores.figures.get("pod")).toMatchObject({ swept: 60, rate: { limit: 3600 } });
    // Their labels are plain ids with no note and no record: unknown assignments.
    expect(swept.events[0]).toMatchObject({ event: "orphan_deleted", reason: "its assignment is unknown" });
    expect((await s.state()).servers.map((v) => v.labels["gdr-assignment"]).sort()).toEqual(["keep-1", "other-backend", "other-instance"]);
  });

  it("the sweep deletes a server whose assignment ended at once, one unknown past the grace, and any past its lifetime; a live one stays", async () => {
    const s = await scene();
    for (const id of ["live", "ended", "unknown", "old"]) await s.driver.accept(request(id, { name: "p" }), within());
    const records = new Map([
      ["live", { ended: false }],
      ["ended", { ended: true }],
      ["old", { ended: false }],
    ]);
    // Within the grace (a note or record may be on its way) only the ended one goes: its teardown failed.
    s.clock.t = Date.now() + 1_000;
    const young = await s.sweep(records, new Map([["p", 60 * 60_000]]));
    expect(young.events).toEqual([{ event: "orphan_deleted", assignment: "ended", reason: "its assignment has ended" }]);
    s.clock.t += ORPHAN_GRACE_MS + 5_000;
    expect((await s.sweep(records, new Map([["p", 60 * 60_000]]))).events.map((e) => e.reason)).toEqual(["its assignment is unknown"]);
    expect((await s.state()).servers.map((v) => v.labels["gdr-assignment"]).sort()).toEqual(["live", "old"]);
    s.clock.t += 60 * 60_000;
    const last = await s.sweep(records, new Map([["p", 60 * 60_000]]));
    expect(last.events.map((e) => e.reason)).toEqual(["older than its lifetime (60 min)", "older than its lifetime (60 min)"]);
    expect((await s.state()).servers).toHaveLength(0);
  });
});
