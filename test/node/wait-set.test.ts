// The wait set (state/wait-set.ts) against the real nats-server: first in first out per
// repository, the oldest of each repository as the heads, a job put in twice kept once, names
// that are not what they seem (dots, "constructor") kept apart, and a republish kept once per id.
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { consumerName } from "../../src/nats/names.ts";
import { MAX_ASSIGNMENT_BYTES } from "../../src/model/assignment.ts";
import { withNats } from "../../src/nats/connection.ts";
import { glanceAt, isTurnMessage, lookAt, turnMessageId, type WaitSet } from "../../src/state/wait-set.ts";
import { pullNoWait } from "../../src/nats/pull.ts";
import type { Backend } from "../../src/nats/names.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };
/** The oldest waiting job of each repository, up to `limit` repositories, as a turn-giving pass reads them. */
const headsOf = async (w: WaitSet, backend: Backend, limit: number) => w.headsOf(backend, await w.repositories(backend, limit));
const entry = (id: string, repository: string) => ({ id, owner: repository.split("/")[0]!, repository, data: btoa(`{"id":"${id}"}`) });

describe("the wait set", () => {
  it("keeps each repository's jobs in order, lists the oldest of each, and takes them out by sequence", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      expect(await waiting.any("pod")).toBe(false);
      for (const [id, repo] of [
        ["a1", "a/mono"],
        ["a2", "a/mono"],
        ["b1", "b/fix"],
        ["c1", "constructor/app.v2"],
        ["a3", "a/mono"],
      ] as const)
        await waiting.add("pod", entry(id, repo), "inc");
      // The same job again (a pass that died before its ack): one entry.
      await waiting.add("pod", entry("a2", "a/mono"), "inc");
      expect(await waiting.any("pod")).toBe(true);
      expect(await waiting.any("vm")).toBe(false);
      const heads = await headsOf(waiting, "pod", 64);
      expect(heads.map((h) => [h.id, h.repository]).sort()).toEqual([
        ["a1", "a/mono"],
        ["b1", "b/fix"],
        ["c1", "constructor/app.v2"],
      ]);
      expect(Object.fromEntries(await waiting.counts("pod"))).toEqual({ "a/mono": 3, "b/fix": 1, "constructor/app.v2": 1 });
      const a1 = heads.find((h) => h.id === "a1")!;
      const a2 = await waiting.next("pod", "a/mono", a1.seq);
      expect(a2?.id).toBe("a2");
      await waiting.remove(a1.seq);
      // Two passes that gave the same turn both remove it: the second is no error, for the
      // stream's first message and for one inside it (the server answers each differently).
      await waiting.remove(a1.seq);
      const b1 = heads.find((h) => h.id === "b1")!;
      await waiting.remove(b1.seq);
      await waiting.remove(b1.seq);
      await waiting.add("pod", entry("b1", "b/fix"), "inc2");
      expect((await headsOf(waiting, "pod", 64)).find((h) => h.repository === "a/mono")?.id).toBe("a2");
      expect(await waiting.next("pod", "a/mono", (await waiting.next("pod", "a/mono", a2!.seq))!.seq)).toBeUndefined();
      // A limit on the repositories looked at.
      expect(await headsOf(waiting, "pod", 1)).toHaveLength(1);
    });
  });

  it("reads the oldest jobs of a backend whatever their repository, in order, up to the number asked; fewer when fewer wait; another backend's are not among them", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      expect(await waiting.oldest("pod", 4)).toEqual([]);
      for (const [id, repo] of [
        ["a1", "a/mono"],
        ["b1", "b/fix"],
        ["a2", "a/mono"],
        ["c1", "constructor/app.v2"],
        ["a3", "a/mono"],
      ] as const)
        await waiting.add("pod", entry(id, repo), "i1");
      await waiting.add("vm", entry("v1", "a/mono"), "i1");
      expect((await waiting.oldest("pod", 4)).map((h) => [h.id, h.repository])).toEqual([
        ["a1", "a/mono"],
        ["b1", "b/fix"],
        ["a2", "a/mono"],
        ["c1", "constructor/app.v2"],
      ]);
      const all = await waiting.oldest("pod", 32);
      expect(all.map((h) => h.id)).toEqual(["a1", "b1", "a2", "c1", "a3"]);
      // One look: the heads from the batch; a3 is a2's next, found in it.
      const view = await lookAt(waiting, "pod", await glanceAt(waiting, "pod", 4));
      expect(view.heads.map((h) => h.id).sort()).toEqual(["a1", "b1", "c1"]);
      expect((await view.next("a/mono", all[2]!.seq))?.id).toBe("a3");
    });
  });

  it("takes out a backend's oldest jobs in one request, up to and including a sequence; near misses: the next one, another backend's older one, and a repeat of it are no harm", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      await waiting.add("vm", entry("v1", "a/mono"), "i1");
      for (const [id, repo] of [
        ["a1", "a/mono"],
        ["b1", "b/fix"],
        ["a2", "a/mono"],
        ["c1", "constructor/app.v2"],
      ] as const)
        await waiting.add("pod", entry(id, repo), "i1");
      const [, b1] = await waiting.oldest("pod", 32);
      await waiting.removeThrough("pod", b1!.seq);
      expect((await waiting.oldest("pod", 32)).map((h) => h.id)).toEqual(["a2", "c1"]);
      expect((await waiting.oldest("vm", 32)).map((h) => h.id)).toEqual(["v1"]);
      // Twice (another pass took them out meanwhile): nothing more goes.
      await waiting.removeThrough("pod", b1!.seq);
      expect((await waiting.oldest("pod", 32)).map((h) => h.id)).toEqual(["a2", "c1"]);
      // A job put in afterwards lies above: none can be put in below the last.
      await waiting.add("pod", entry("b2", "b/fix"), "i1");
      await waiting.removeThrough("pod", (await waiting.oldest("pod", 1))[0]!.seq);
      expect((await waiting.oldest("pod", 32)).map((h) => h.id)).toEqual(["c1", "b2"]);
      expect(await waiting.any("pod")).toBe(true);
    });
  });

  it("a glance at the oldest jobs is never cut short by their size: entries of the largest assignment, one more than asked for", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      const data = btoa("x".repeat(MAX_ASSIGNMENT_BYTES));
      for (let i = 0; i < 33; i++) await waiting.add("pod", { ...entry(`big-${i}`, `r/${i % 3}`), data }, "i1");
      const glance = await glanceAt(waiting, "pod", 32);
      expect([glance.oldest.length, glance.whole]).toEqual([32, false]);
      expect((await waiting.oldest("pod", 40)).length).toBe(33);
    });
  });

  it("a republished assignment reaches the consumer once per message id", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const data = new TextEncoder().encode('{"id":"x"}');
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      expect(await waiting.republish("pod", data, turnMessageId("x", 7))).toBe(true);
      expect(await waiting.republish("pod", data, turnMessageId("x", 7))).toBe(false);
    });
    const pending = await withNats(config, async (h) => (await (await jetstreamManager(h.nc)).consumers.info(config.stream, consumerName("pod"))).num_pending);
    expect(pending).toBe(1);
    // Its delivery knows it for a turn's by the message id the server kept (a pass asks nobody whether anybody waits for it).
    const [delivered] = await withNats(config, (h) => pullNoWait(h.nc, config.stream, consumerName("pod"), 1));
    expect([delivered?.msgId, isTurnMessage(delivered?.msgId)]).toEqual([turnMessageId("x", 7), true]);
    // Near misses: a job's own message id, an id that ends like a turn's without its number.
    expect([isTurnMessage("x"), isTurnMessage("x.turn-"), isTurnMessage(undefined)]).toEqual([false, false, false]);
  });

  it("an id reused under a new incarnation enters again within the duplicate window; the same incarnation does not", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await createDispatcher({ config, sink: silent }).withState(async ({ waiting }) => {
      await waiting.add("pod", entry("gitea-5-1", "b/fix"), "inc-1");
      const [first] = await headsOf(waiting, "pod", 64);
      await waiting.remove(first!.seq);
      // A pass that died before its ack puts the same incarnation in again: dropped.
      await waiting.add("pod", entry("gitea-5-1", "b/fix"), "inc-1");
      expect(await waiting.any("pod")).toBe(false);
      // The id's record was made anew (a rerun with the same id after its end): it waits again.
      await waiting.add("pod", entry("gitea-5-1", "b/fix"), "inc-2");
      expect((await headsOf(waiting, "pod", 64)).map((h) => h.id)).toEqual(["gitea-5-1"]);
    });
  });
});
