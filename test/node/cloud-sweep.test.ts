// The cloud sweeps' pure decisions: what the notes say of a listed workload (knowServer,
// knowInstance) and whether it goes (judgeWorkload). A workload of a live assignment of this
// deployment is adopted, never deleted as unknown; one whose assignment another workload runs goes
// after the grace; a reused server's job counts its lifetime from its own start.
import { describe, expect, it } from "vitest";
import { DEFAULT_LIFETIME_MS, judgeWorkload, ORPHAN_GRACE_MS, type Known } from "../../src/backends/cloud-sweep.ts";
import { knowServer } from "../../src/backends/hetzner/sweep.ts";
import { bootMark } from "../../src/backends/hetzner/server-body.ts";
import { knowInstance } from "../../src/backends/ec2/sweep.ts";
import { clientToken } from "../../src/backends/ec2/run-body.ts";

const T = Date.parse("2026-12-07T12:00:00Z");
const ago = (ms: number) => new Date(T - ms).toISOString();
const none = new Map<string, number>();
const judge = (createdAgo: number, known: Known | undefined, record: { ended: boolean } | undefined, lifetimes = none) =>
  judgeWorkload({ created: ago(createdAgo), pool: "p" }, T, known, record, lifetimes);

describe("judgeWorkload", () => {
  const live = { ended: false };
  const ended = { ended: true };
  it.each([
    ["noted, live, young", 60_000, { id: "a", how: "noted" }, live, { delete: false }],
    ["noted, live, past the grace", ORPHAN_GRACE_MS + 1, { id: "a", how: "noted" }, live, { delete: false }],
    ["noted, ended: at once", 1_000, { id: "a", how: "noted" }, ended, { delete: true, reason: "its assignment has ended" }],
    ["noted, no record, past the grace", ORPHAN_GRACE_MS + 1, { id: "a", how: "noted" }, undefined, { delete: true, reason: "its assignment is unknown" }],
    ["adoptable, live, young: adopted at once", 1_000, { id: "a", how: "adoptable" }, live, { delete: false, adopt: true }],
    ["adoptable, live, old: adopted", ORPHAN_GRACE_MS * 3, { id: "a", how: "adoptable" }, live, { delete: false, adopt: true }],
    ["adoptable, ended", 1_000, { id: "a", how: "adoptable" }, ended, { delete: true, reason: "its assignment has ended" }],
    ["adoptable, no record, young", 1_000, { id: "a", how: "adoptable" }, undefined, { delete: false }],
    [
      "adoptable, no record, past the grace",
      ORPHAN_GRACE_MS + 1,
      { id: "a", how: "adoptable" },
      undefined,
      { delete: true, reason: "its assignment is unknown" },
    ],
    ["superseded, live, young", 1_000, { id: "a", how: "superseded" }, live, { delete: false }],
    [
      "superseded, live, past the grace",
      ORPHAN_GRACE_MS + 1,
      { id: "a", how: "superseded" },
      live,
      { delete: true, reason: "another workload runs its assignment" },
    ],
    ["unknown, young", 1_000, undefined, undefined, { delete: false }],
    ["unknown, past the grace", ORPHAN_GRACE_MS + 1, undefined, undefined, { delete: true, reason: "no assignment of this dispatcher knows it" }],
  ] as const)("%s", (_name, createdAgo, known, record, want) => {
    expect(judge(createdAgo, known as Known | undefined, record)).toEqual(want);
  });

  it("a job's lifetime counts from its own start (a reused server), not the server's creation; near miss: one minute more", () => {
    const lifetimes = new Map([["p", 6 * 3_600_000]]);
    const since = T - 35 * 60_000;
    const old = 6 * 3_600_000 + 11 * 60_000;
    expect(judge(old, { id: "a", how: "noted", since }, { ended: false }, lifetimes)).toEqual({ delete: false });
    const late = T - (6 * 3_600_000 + ORPHAN_GRACE_MS + 60_000);
    expect(judge(old + 3_600_000, { id: "a", how: "noted", since: late }, { ended: false }, lifetimes)).toMatchObject({ delete: true });
    // A superseded workload's age is its own, whatever the note says.
    expect(judge(DEFAULT_LIFETIME_MS + ORPHAN_GRACE_MS + 1, { id: "a", how: "superseded", since: T }, { ended: false })).toMatchObject({ delete: true });
  });
});

describe("what the notes say of a listed workload", () => {
  const server = (labels: Record<string, string>) => ({ id: 7, name: "n", status: "running", created: ago(1_000), labels });
  it("hetzner: adoptable only with the noted create's bootstrap mark; another mark is superseded; a note naming another server too", async () => {
    const mark = await bootMark("boot.key-1");
    const other = await bootMark("boot.key-0");
    const creating = { id: "job-1", createdAt: T, creating: "boot.key-1" };
    expect(knowServer(server({ "gdr-boot": mark }), "job-1", creating, mark)).toEqual({ id: "job-1", how: "adoptable" });
    expect(knowServer(server({ "gdr-boot": other }), "job-1", creating, mark)).toEqual({ id: "job-1", how: "superseded" });
    expect(knowServer(server({}), "job-1", creating, mark)).toEqual({ id: "job-1", how: "superseded" });
    expect(knowServer(server({}), "job-1", { id: "job-1", serverId: 7, createdAt: T - 5 }, undefined)).toEqual({ id: "job-1", how: "noted", since: T - 5 });
    expect(knowServer(server({}), "job-1", { id: "job-1", serverId: 8, createdAt: T }, undefined)).toEqual({ id: "job-1", how: "superseded" });
    // No note: a plain label is the assignment's id; a hashed one names none.
    expect(knowServer(server({}), "gitea-5-1", undefined, undefined)).toEqual({ id: "gitea-5-1", how: "adoptable" });
    expect(knowServer(server({}), "weird--0123456789abcdef", undefined, undefined)).toBeUndefined();
    expect(knowServer(server({}), undefined, undefined, undefined)).toBeUndefined();
  });

  it("ec2: adoptable only with the noted attempt's ClientToken; another round's is superseded", async () => {
    const note = { id: "job-1", round: 2, attempt: 1, createdAt: T };
    const instance = (clientTokenOf: string | undefined, id = "i-1") => ({
      id,
      type: "m7i.large",
      state: "running",
      launchTime: ago(1_000),
      ...(clientTokenOf ? { clientToken: clientTokenOf } : {}),
      tags: { "gdr-assignment": "job-1" },
    });
    const mine = await clientToken("inst", "job-1", 2, 1);
    expect(await knowInstance(instance(mine), note, "inst")).toEqual({ id: "job-1", how: "adoptable" });
    expect(await knowInstance(instance(await clientToken("inst", "job-1", 1, 1)), note, "inst")).toEqual({ id: "job-1", how: "superseded" });
    expect(await knowInstance(instance(await clientToken("other", "job-1", 2, 1)), note, "inst")).toEqual({ id: "job-1", how: "superseded" });
    expect(await knowInstance(instance(mine), { ...note, instanceId: "i-1" }, "inst")).toEqual({ id: "job-1", how: "noted", since: T });
    expect(await knowInstance(instance(mine), { ...note, instanceId: "i-2" }, "inst")).toEqual({ id: "job-1", how: "superseded" });
  });
});
