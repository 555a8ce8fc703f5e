// What the isolate remembers of the wait set (waiting-seen.ts), over an in-memory wait set that
// counts its requests: a "yes" it saw answers "does anybody wait" for WAITING_SEEN_MS, a "no" is
// never kept, and a removal forgets. Near misses: past the window, another backend, a put dropped
// as a repeat, a read that found nobody, a read made while a removal was under way.
import { describe, expect, it } from "vitest";
import { memoryWaitSet, waitEntry } from "../harness/memory-wait-set.ts";
import { createWaitingSeen, rememberWaiting, WAITING_SEEN_MS } from "../../src/state/waiting-seen.ts";

const entry = waitEntry;

function setUp() {
  const mem = memoryWaitSet();
  let clock = 1_000_000;
  const seen = createWaitingSeen();
  const waiting = rememberWaiting(mem.set, seen, () => clock);
  return { ...mem, waiting, seen, advance: (ms: number) => (clock += ms) };
}

describe("what the isolate saw of the wait set", () => {
  it("a job this isolate put in answers whether anybody waits, asking nobody, for WAITING_SEEN_MS", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    t.advance(WAITING_SEEN_MS);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual([]);
  });

  it("near miss: past WAITING_SEEN_MS it asks again, and the answer it gets is kept anew", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    t.advance(WAITING_SEEN_MS + 1);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual(["pod"]);
  });

  it("near miss: a yes about one backend answers nothing of another", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    expect(await t.waiting.any("vm")).toBe(false);
    expect(t.asked).toEqual(["vm"]);
  });

  it("near miss: a put dropped as a repeat (its entry may have had its turn since) says nothing", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    const [head] = await t.waiting.headsOf("pod", ["acme/app"]);
    await t.waiting.remove(head!.seq);
    expect(await t.waiting.add("pod", entry("a"), "i1")).toBe(false);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
  });

  it("never keeps a no: a job put in by another isolate is seen by the next question", async () => {
    const t = setUp();
    expect(await t.waiting.any("pod")).toBe(false);
    // Another isolate's put, straight into the store.
    await t.set.add("pod", entry("b"), "i1");
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual(["pod", "pod"]);
  });

  it("a removal forgets every yes: the next question asks, and finds nobody", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    await t.waiting.add("vm", entry("v"), "i1");
    const [head] = await t.waiting.headsOf("pod", ["acme/app"]);
    await t.waiting.remove(head!.seq);
    expect(await t.waiting.any("pod")).toBe(false);
    // Another backend's yes goes too: a removal does not say whose entry it was.
    expect(await t.waiting.any("vm")).toBe(true);
    expect(t.asked).toEqual(["pod", "vm"]);
  });

  it("near miss: a read that saw the entry while its removal was under way counts for nothing", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    const [head] = await t.waiting.headsOf("pod", ["acme/app"]);
    t.advance(WAITING_SEEN_MS + 1);
    t.duringRemove(async () => void expect(await t.waiting.any("pod")).toBe(true));
    await t.waiting.remove(head!.seq);
    expect(await t.waiting.any("pod")).toBe(false);
  });

  it("a head read after a removal (the pass's next in that repository) is a yes again; repositories found none is a no", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    await t.waiting.add("pod", entry("b"), "i1");
    const [head] = await t.waiting.headsOf("pod", ["acme/app"]);
    await t.waiting.remove(head!.seq);
    expect(await t.waiting.next("pod", "acme/app", head!.seq)).toMatchObject({ id: "b" });
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual([]);
    // Another isolate gives b its turn; this one's look for turns finds nobody, and forgets.
    t.entries.splice(0);
    expect(await t.waiting.repositories("pod", 64)).toEqual([]);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
  });

  it("a glance at the oldest jobs that found nobody is a no; one that found some is a yes", async () => {
    const t = setUp();
    await t.set.add("pod", entry("a"), "i1");
    expect(await t.waiting.oldest("pod", 32)).toHaveLength(1);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual([]);
    // Another isolate gives it its turn; this one's glance finds nobody, and forgets.
    t.entries.splice(0);
    expect(await t.waiting.oldest("pod", 32)).toEqual([]);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
  });
});
