// One look at the wait set (glanceAt, lookAt): the heads of every repository from one read of the
// oldest jobs, and each turn's next from the same read where it holds it. Over an in-memory wait
// set that names each request. Near misses: a glance that did not hold every job (the repositories
// listed, and one whose oldest job is past it read on its own), a next past a full glance (read),
// no next after a glance that held everyone (not read).
import { describe, expect, it } from "vitest";
import { glanceAt, lookAt } from "../../src/state/wait-set.ts";
import { memoryWaitSet, waitEntry } from "../harness/memory-wait-set.ts";

/** A glance at the `limit` oldest jobs of pod, and the look from it: as admitWaiting takes them. */
const look = async (mem: ReturnType<typeof memoryWaitSet>, limit: number) => lookAt(mem.set, "pod", await glanceAt(mem.set, "pod", limit));

async function filled(jobs: [string, string][]) {
  const mem = memoryWaitSet();
  for (const [id, repository] of jobs) await mem.set.add("pod", waitEntry(id, repository), "i1");
  return mem;
}

describe("a look at the wait set", () => {
  it("reads the heads of every repository in one request when the oldest jobs hold them", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["a2", "a/one"],
      ["c1", "c/three"],
    ]);
    const view = await look(mem, 8);
    expect(view.heads.map((h) => h.id)).toEqual(["a1", "b1", "c1"]);
    expect(mem.calls).toEqual(["oldest 8"]);
  });

  it("near miss: a glance that did not hold every job lists the repositories, and reads the head of one whose oldest is past it", async () => {
    const mem = await filled([
      ["a1", "a/mono"],
      ["a2", "a/mono"],
      ["a3", "a/mono"],
      ["b1", "b/fix"],
    ]);
    const view = await look(mem, 3);
    expect(view.heads.map((h) => h.id)).toEqual(["a1", "b1"]);
    expect(mem.calls).toEqual(["oldest 3", "repositories", "headsOf b/fix"]);
  });

  it("near miss: a glance whose every repository's head it holds, though it did not hold every job, reads none on its own", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["a2", "a/one"],
    ]);
    const view = await look(mem, 2);
    expect(view.heads.map((h) => h.id)).toEqual(["a1", "b1"]);
    expect(mem.calls).toEqual(["oldest 2", "repositories"]);
  });

  it("a glance that found nobody is empty, and whole", async () => {
    const mem = memoryWaitSet();
    expect(await glanceAt(mem.set, "pod")).toEqual({ oldest: [], whole: true });
  });

  it("a turn's next comes from the batch where it holds it, with no request", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["a2", "a/one"],
      ["a3", "a/one"],
    ]);
    const view = await look(mem, 3);
    const [a1] = view.heads;
    expect((await view.next("a/one", a1!.seq))?.id).toBe("a2");
    expect(mem.calls).toEqual(["oldest 3", "repositories"]);
  });

  it("near miss: a next past a full batch is read", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["b2", "b/two"],
      ["a2", "a/one"],
    ]);
    const view = await look(mem, 3);
    expect((await view.next("a/one", view.heads[0]!.seq))?.id).toBe("a2");
    expect(mem.calls).toEqual(["oldest 3", "repositories", "next a/one"]);
  });

  it("near miss: after a batch that held every job, a repository with no more has no next, and nothing is read", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
    ]);
    const view = await look(mem, 8);
    expect(await view.next("a/one", view.heads[0]!.seq)).toBeUndefined();
    expect(mem.calls).toEqual(["oldest 8"]);
  });
});
