// What the isolate remembers of the wait set (waiting-seen.ts), over an in-memory wait set that
// counts its requests: a "yes" it saw answers "does anybody wait" for WAITING_SEEN_MS while an
// entry it saw was not taken out here, a "no" is never kept. Near misses: past the window, another
// backend, a put dropped as a repeat, a read that found nobody, a read made while a removal was
// under way, the last entry seen taken out, a "yes" that named no entry and a removal.
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
    expect(await t.waiting.add("pod", entry("a"), "i1")).toBeUndefined();
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

  it("taking out the last entry seen ends the yes: the next question asks, and finds nobody; another backend's entry still answers", async () => {
    const t = setUp();
    await t.waiting.add("pod", entry("a"), "i1");
    await t.waiting.add("vm", entry("v"), "i1");
    const [head] = await t.waiting.headsOf("pod", ["acme/app"]);
    await t.waiting.remove(head!.seq);
    expect(await t.waiting.any("pod")).toBe(false);
    // The removal named its entry: the other backend's, seen by its sequence, still answers.
    expect(await t.waiting.any("vm")).toBe(true);
    expect(t.asked).toEqual(["pod"]);
  });

  it("a turn given here leaves the yes of the entries it saw and did not take out: a glance at three, two turns, and the third still answers", async () => {
    const t = setUp();
    for (const id of ["a", "b", "c"]) await t.set.add("pod", entry(id), "i1");
    const seen = await t.waiting.oldest("pod", 32);
    await t.waiting.remove(seen[0]!.seq);
    await t.waiting.remove(seen[1]!.seq);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual([]);
    // Near miss: the third taken out too, and nobody answers from memory.
    await t.waiting.remove(seen[2]!.seq);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
  });

  it("near miss: a yes that named no entry (a question answered) goes with any removal here, which may have emptied it", async () => {
    const t = setUp();
    await t.set.add("pod", entry("a"), "i1");
    await t.set.add("pod", entry("b"), "i1");
    t.advance(WAITING_SEEN_MS + 1);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual(["pod"]);
    // Another entry's removal: which backend, or whether it was the last, is not known here.
    await t.waiting.remove(999);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual(["pod", "pod"]);
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

  it("near miss: a read that named the entry and answered after its removal here counts for nothing", async () => {
    const t = setUp();
    await t.set.add("pod", entry("a"), "i1");
    // The glance was sent before the removal and answers after it: it still names the entry.
    const late = await t.set.oldest("pod", 32);
    await t.waiting.remove(late[0]!.seq);
    t.seen.saw("pod", 1_000_000, [late[0]!.seq]);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
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

  it("says a question is under way while it is, and not once it is answered or failed; a yes from memory asks nothing", async () => {
    const t = setUp();
    let answer!: (v: boolean) => void;
    const slow = { ...t.set, any: () => new Promise<boolean>((r) => (answer = r)) };
    const waiting = rememberWaiting(slow, t.seen, () => 1_000_000);
    expect(waiting.asking("pod")).toBe(false);
    const asked = waiting.any("pod");
    expect(waiting.asking("pod")).toBe(true);
    // Near miss: another backend's question is not this one's.
    expect(waiting.asking("vm")).toBe(false);
    answer(true);
    expect(await asked).toBe(true);
    expect(waiting.asking("pod")).toBe(false);
    // Answered from memory (that yes): nothing under way.
    const cached = waiting.any("pod");
    expect(waiting.asking("pod")).toBe(false);
    expect(await cached).toBe(true);
    // A question that fails is not under way any more.
    const failing = rememberWaiting({ ...t.set, any: () => Promise.reject(new Error("down")) }, createWaitingSeen(), () => 1);
    await expect(failing.any("pod")).rejects.toThrow("down");
    expect(failing.asking("pod")).toBe(false);
  });

  it("a backend's oldest entries taken out together end the yes they gave; near misses: an entry above them still answers, and a read naming one of them afterwards counts for nothing", async () => {
    const t = setUp();
    for (const id of ["a", "b", "c"]) await t.set.add("pod", entry(id), "i1");
    const [a, b, c] = await t.waiting.oldest("pod", 32);
    await t.waiting.removeThrough("pod", b!.seq);
    expect(await t.waiting.any("pod")).toBe(true);
    expect(t.asked).toEqual([]);
    t.seen.saw("pod", 1_000_000, [a!.seq]);
    await t.waiting.remove(c!.seq);
    expect(await t.waiting.any("pod")).toBe(false);
    expect(t.asked).toEqual(["pod"]);
  });
});
