// One look at the wait set (lookAt): the heads of every repository from one read of the oldest
// jobs, and each turn's next from the same read where it holds it. Over an in-memory wait set
// that names each request. Near misses: a repository whose oldest job is past the batch (read on
// its own), a repository gone since it was listed (not read when the batch held everyone), a next
// past a full batch (read), no next after a batch that held everyone (not read).
import { describe, expect, it } from "vitest";
import { lookAt } from "../../src/state/wait-set.ts";
import { memoryWaitSet, waitEntry } from "../harness/memory-wait-set.ts";

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
    const view = await lookAt(mem.set, "pod", ["a/one", "b/two", "c/three"], 8);
    expect(view.heads.map((h) => h.id)).toEqual(["a1", "b1", "c1"]);
    expect(mem.calls).toEqual(["oldest 8"]);
  });

  it("near miss: a repository whose oldest job is past a full batch is read on its own", async () => {
    const mem = await filled([
      ["a1", "a/mono"],
      ["a2", "a/mono"],
      ["a3", "a/mono"],
      ["b1", "b/fix"],
    ]);
    const view = await lookAt(mem.set, "pod", ["a/mono", "b/fix"], 3);
    expect(view.heads.map((h) => h.id)).toEqual(["a1", "b1"]);
    expect(mem.calls).toEqual(["oldest 3", "headsOf b/fix"]);
  });

  it("near miss: a repository listed but gone since is not read when the batch held every job", async () => {
    const mem = await filled([["a1", "a/one"]]);
    const view = await lookAt(mem.set, "pod", ["a/one", "b/gone"], 8);
    expect(view.heads.map((h) => h.id)).toEqual(["a1"]);
    expect(mem.calls).toEqual(["oldest 8"]);
  });

  it("a turn's next comes from the batch where it holds it, with no request", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["a2", "a/one"],
      ["a3", "a/one"],
    ]);
    const view = await lookAt(mem.set, "pod", ["a/one", "b/two"], 3);
    const [a1] = view.heads;
    expect((await view.next("a/one", a1!.seq))?.id).toBe("a2");
    expect(mem.calls).toEqual(["oldest 3"]);
  });

  it("near miss: a next past a full batch is read", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
      ["b2", "b/two"],
      ["a2", "a/one"],
    ]);
    const view = await lookAt(mem.set, "pod", ["a/one", "b/two"], 3);
    expect((await view.next("a/one", view.heads[0]!.seq))?.id).toBe("a2");
    expect(mem.calls).toEqual(["oldest 3", "next a/one"]);
  });

  it("near miss: after a batch that held every job, a repository with no more has no next, and nothing is read", async () => {
    const mem = await filled([
      ["a1", "a/one"],
      ["b1", "b/two"],
    ]);
    const view = await lookAt(mem.set, "pod", ["a/one", "b/two"], 8);
    expect(await view.next("a/one", view.heads[0]!.seq)).toBeUndefined();
    expect(mem.calls).toEqual(["oldest 8"]);
  });
});
