// reuse: "rebuild" over the fake Hetzner API: a finished job's server is parked while its paid
// hour lasts and rebuilt for the pool's next job with that job's own one-time token (never the
// last job's); racing jobs take it once; one gone meanwhile is replaced by a create; the sweep
// deletes a parked server before its next hour, and never takes it for an orphan.
import { describe, expect, it } from "vitest";
import { PARK_MIN_LEFT_MS, PARKED_DELETE_LEFT_MS, takeParked } from "../../src/backends/hetzner/reuse.ts";
import { createHetznerApi } from "../../src/backends/hetzner/client.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { bootOf, readLaunch } from "../../scripts/simulate-hetzner.mjs";
import { createNotes } from "../../src/backends/hetzner/notes.ts";
import { type HetznerScene, keptScenes, vmRequest } from "../harness/hetzner.ts";

const HOUR = 3_600_000;
const { scene } = keptScenes();
const request = (id: string, reuse = true) => vmRequest(id, { name: "small", ...(reuse ? { reuse: "rebuild" as const } : {}) });
const within = () => AbortSignal.timeout(3_000);
const kinds = async (s: HetznerScene) =>
  (await s.state()).requests.map((r) => `${r.method} ${r.path.replace(/\d+/g, "{id}")}`).filter((r) => !r.includes("_control"));

describe("reuse: rebuild", () => {
  it("parks a finished server and rebuilds it for the next job with that job's own token; nothing is deleted or created twice", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("a-1"), within());
    const first = (await s.state()).servers[0]!;
    await s.driver.teardown("a-1", within());
    expect(await kinds(s)).toEqual(["POST /servers"]);
    expect(await s.driver.accept(request("b-1"), within())).toBe("pending");
    expect(await kinds(s)).toEqual(["POST /servers", "POST /servers/{id}/actions/rebuild"]);
    // Taken, and off the list once its note names it: nothing of it is left there, taken or not.
    expect(await createNotes(s.stores.kv).parked("pod", undefined, true)).toEqual([]);
    // The passes while it boots ask nothing more.
    expect(await s.driver.accept(request("b-1"), within())).toBe("pending");
    expect(await kinds(s)).toEqual(["POST /servers", "POST /servers/{id}/actions/rebuild"]);
    const rebuilt = (await s.state()).servers;
    expect(rebuilt.map((v) => v.id)).toEqual([first.id]);
    const before = bootOf(first.userData)!;
    const after = bootOf(rebuilt[0]!.userData)!;
    expect(after.url).toBe("https://dispatch.example.org/v1/assignments/b-1/bootstrap");
    expect(after.token).not.toBe(before.token);
    // The last job's token is spent for the last job only: it opens nothing for the next one.
    expect(await s.stores.bootstraps.take("b-1", before.token)).toBeUndefined();
    const launch = await s.stores.bootstraps.take<{ script: string }>("b-1", after.token);
    expect(readLaunch(launch!.script).files[".runner"]).toContain("identity-of-b-1");
    // The rebuilt server's next end parks it again; the sweep keeps it (not an orphan, not ended) while its hour lasts.
    await s.driver.teardown("b-1", within());
    s.clock.t = Date.now() + ORPHAN_GRACE_MS + 60_000;
    expect((await s.sweep(new Map([["b-1", { ended: true }]]))).deleted).toBe(0);
    // …and deletes it before its next hour begins.
    s.clock.t = Date.parse(new Date(first.createdAt).toISOString()) + HOUR - PARKED_DELETE_LEFT_MS + 1_000;
    const swept = await s.sweep(new Map([["b-1", { ended: true }]]));
    expect(swept.events).toEqual([{ event: "orphan_deleted", assignment: first.name, reason: "parked, nothing took it before its next paid hour" }]);
    expect((await s.state()).servers).toEqual([]);
  });

  it("deletes at once a server with too little of its hour left; a pool without reuse deletes always", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("c-1"), within());
    const created = (await s.state()).servers[0]!.createdAt;
    s.clock.t = created + HOUR - PARK_MIN_LEFT_MS + 1_000;
    await s.driver.teardown("c-1", within());
    expect((await s.state()).servers).toEqual([]);
    s.clock.t = Date.now();
    await s.driver.accept(request("d-1", false), within());
    await s.driver.teardown("d-1", within());
    expect((await s.state()).servers).toEqual([]);
    expect(await s.driver.accept(request("e-1"), within())).toBe("pending");
    expect((await kinds(s)).filter((k) => k.includes("rebuild"))).toEqual([]);
  });

  it("two jobs racing for one parked server: one rebuilds it, the other creates; one gone meanwhile is replaced by a create", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("r-1"), within());
    await s.driver.teardown("r-1", within());
    await Promise.all([s.driver.accept(request("r-2"), within()), s.driver.accept(request("r-3"), within())]);
    const k = await kinds(s);
    expect(k.filter((x) => x === "POST /servers/{id}/actions/rebuild")).toHaveLength(1);
    expect(k.filter((x) => x === "POST /servers")).toHaveLength(2);
    expect((await s.state()).servers).toHaveLength(2);
    // Parked, then deleted behind our back: the next job gets a new server.
    await s.driver.teardown("r-2", within());
    const [parked] = await createNotes(s.stores.kv).parked("pod", "small");
    await fetch(`${s.base}/servers/${parked!.value.serverId}`, { method: "DELETE", headers: { authorization: "Bearer hcloud-token-0000" } });
    expect(await s.driver.accept(request("r-4"), within())).toBe("pending");
    const left = (await s.state()).servers;
    expect(left).toHaveLength(2);
    expect(left.map((v) => v.labels["gdr-assignment"])).toContain("r-4");
    expect(await createNotes(s.stores.kv).parked("pod")).toEqual([]);
  });

  it("a job on a reused server may run its pool's maxLifetimeMs from its own start, whatever the server's age", async () => {
    const s = await scene();
    const lifetimes = new Map([["small", 6 * HOUR]]);
    // A server made 5 h 36 min ago, parked with 24 minutes of its hour left, taken for the next job.
    const age = 5 * HOUR + 36 * 60_000;
    await s.ctl("clock", { advanceMs: -age });
    s.clock.t = Date.now() - age;
    await s.driver.accept(request("a-1"), within());
    await s.ctl("clock", { advanceMs: age });
    s.clock.t = Date.now();
    await s.driver.teardown("a-1", within());
    expect(await s.driver.accept(request("b-1"), within())).toBe("pending");
    const live = new Map([["b-1", { ended: false }]]);
    // 35 minutes into the job: the server is 6 h 11 min old, the job far within its 6 hours.
    s.clock.t += 35 * 60_000;
    expect((await s.sweep(live, lifetimes)).events).toEqual([]);
    s.clock.t += 6 * HOUR - 35 * 60_000 + ORPHAN_GRACE_MS - 60_000;
    expect((await s.sweep(live, lifetimes)).events).toEqual([]);
    // Past the job's own lifetime (and the grace): it goes.
    s.clock.t += 2 * 60_000;
    expect((await s.sweep(live, lifetimes)).events).toEqual([{ event: "orphan_deleted", assignment: "b-1", reason: "older than its lifetime (360 min)" }]);
    expect((await s.state()).servers).toEqual([]);
  });

  it("two takers with the same read of the parked list: the one whose compare-and-set lands rebuilds, the other gets nothing", async () => {
    const s = await scene();
    s.clock.t = Date.now();
    await s.driver.accept(request("s-1"), within());
    await s.driver.teardown("s-1", within());
    const notes = createNotes(s.stores.kv);
    const read = await notes.parked("pod", "small");
    const stale = { ...notes, parked: async () => read };
    const api = createHetznerApi({ url: s.base, token: FAKE_HCLOUD_TOKEN });
    const boot = async (id: string) => {
      const token = await s.stores.bootstraps.issue(id, {}, 60_000);
      return { token, key: await s.stores.bootstraps.keyOf(token), userData: "#!/bin/sh\n" };
    };
    const take = async (id: string) =>
      takeParked(
        { api, notes: stale, bootstraps: s.stores.bootstraps, backend: "pod", label: id, signal: within() },
        "small",
        { id, createdAt: s.clock.t },
        await boot(id),
        s.clock.t,
      );
    const [first, second] = [await take("t-1"), await take("t-2")];
    expect(first).toBe(true);
    expect(second).toBe(false);
    expect((await notes.get("pod", "t-1"))?.serverId).toBe(read[0]!.value.serverId);
    expect(await notes.get("pod", "t-2")).toBeUndefined();
    expect((await kinds(s)).filter((k) => k.includes("rebuild"))).toHaveLength(1);
  });
});
