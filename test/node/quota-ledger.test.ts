// QUOTAS limits on the real nats-server (state/quota-ledger.ts): taken by many connections at once,
// an owner's and a repository's limits each hold exactly; a place refused by the second gives the
// first back; a lowered limit takes no place away but admits no new one; ids that are not what
// they seem ("constructor") are ids like any other.
import { Kvm } from "@nats-io/kv";
import { describe, expect, inject, it } from "vitest";
import { recordsBucket } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { readManyJson } from "../../src/state/kv.ts";
import { createQuotaLedger, type Holders, type QuotaLedger } from "../../src/state/quota-ledger.ts";
import type { Versioned } from "../../src/state/kv.ts";
import type { KV } from "@nats-io/kv";
import type { Config } from "../../src/app/config.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";
import { parseQuotas, shareRules } from "../../src/quotas/config.ts";
import { takeQuota, withQuotaRelease } from "../../src/quotas/limits.ts";
import type { Admission } from "../../src/state/admission.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { assignment } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");

/** `fn` with a ledger on a connection of its own, as one invocation would have. */
const withLedger = <T>(config: Config, fn: (ledger: QuotaLedger) => Promise<T>, now = Date.now) =>
  withNats(config, async (h) => {
    const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
    const kv = await new Kvm(h.js).open(bucket);
    return fn(createQuotaLedger(kv, (keys) => readManyJson(h, bucket, keys), 60_000, now));
  });

/** As withLedger, with the isolate's kept revisions `kept`, and the reads and writes it made. */
const withCounted = <T>(config: Config, kept: Map<string, Versioned<Holders>>, fn: (ledger: QuotaLedger, calls: string[], kv: KV) => Promise<T>) =>
  withNats(config, async (h) => {
    const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
    const real = await new Kvm(h.js).open(bucket);
    const calls: string[] = [];
    const kv = new Proxy(real, {
      get(target, prop, receiver) {
        const v: unknown = Reflect.get(target, prop, receiver);
        if (typeof v !== "function") return v;
        return (...a: unknown[]) => {
          if (["get", "update", "create", "put"].includes(String(prop))) calls.push(`${String(prop)} ${String(a[0])}`);
          return (v as (...x: unknown[]) => unknown).apply(target, a);
        };
      },
    });
    return fn(
      createQuotaLedger(kv, (keys) => readManyJson(h, bucket, keys), 60_000, Date.now, kept),
      calls,
      real,
    );
  });

describe("the quota ledger", () => {
  it("keeps a repository's places only under a repository limit: an owner limit alone never writes its record, nor reads it on release", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await withCounted(config, new Map(), async (l, calls, kv) => {
      expect(await l.take("acme", "acme/app", "j1", { owner: 2 })).toBe(true);
      await l.release("acme", "acme/app", "j1", { owner: 2 });
      expect(calls.filter((c) => c.includes(".r."))).toEqual([]);
      expect(await kv.get("q.r.acme.app")).toBeNull();
      // A repository limit alone: the owner's places still count the owner's live runners.
      expect(await l.take("acme", "acme/app", "j2", { repository: 1 })).toBe(true);
      expect(await l.take("acme", "acme/app", "j3", { repository: 1 })).toBe(false);
      expect((await l.held(["acme"])).get("acme")).toBe(1);
    });
  });

  it("writes at the revision this isolate kept, without a read; a copy gone stale (another isolate wrote) is read again, and the limit holds", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const mine = new Map<string, Versioned<Holders>>();
    const theirs = new Map<string, Versioned<Holders>>();
    const limits = { owner: 2 };
    await withCounted(config, mine, async (l, calls) => {
      expect(await l.take("acme", "acme/a", "j1", limits)).toBe(true);
      calls.length = 0;
      // Kept from the take: the release is one write, no read.
      await l.release("acme", "acme/a", "j1", limits);
      expect(calls).toEqual(["update q.o.acme"]);
      calls.length = 0;
      expect(await l.take("acme", "acme/a", "j2", limits)).toBe(true);
      expect(calls).toEqual(["update q.o.acme"]);
    });
    // Another isolate takes the second place: this isolate's copy is stale.
    await withCounted(config, theirs, (l) => l.take("acme", "acme/b", "k1", limits));
    await withCounted(config, mine, async (l, calls) => {
      calls.length = 0;
      // The write at the kept revision fails, the record is read, and the owner is full.
      expect(await l.take("acme", "acme/a", "j3", limits)).toBe(false);
      expect(calls[0]).toBe("update q.o.acme");
      expect(calls).toContain("get q.o.acme");
      expect((await l.held(["acme"])).get("acme")).toBe(2);
    });
    // The other isolate gives j2's place back (a release that ran elsewhere): the stale copy still
    // lists j2, but "already held" is never told from a copy: the take reads, and holds it again.
    await withCounted(config, theirs, (l) => l.release("acme", "acme/a", "j2", limits));
    await withCounted(config, mine, async (l) => {
      expect(await l.take("acme", "acme/a", "j2", limits)).toBe(true);
      expect((await l.held(["acme"])).get("acme")).toBe(2);
      expect(await l.take("acme", "acme/c", "j4", limits)).toBe(false);
    });
  });

  it("holds an owner's limit exactly when many take at once, and a repository's inside it", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const takes = await Promise.all(
      Array.from({ length: 16 }, (_, i) => withLedger(config, (l) => l.take("acme", `acme/r${i % 2}`, `job-${i}`, { owner: 5, repository: 3 }))),
    );
    // Never more than 5. Fewer is possible at once: a take refused by its repository holds the
    // owner's place for a moment before it gives it back. Refused ones taking again fill it.
    expect(takes.filter(Boolean).length).toBeLessThanOrEqual(5);
    for (let i = 0; i < 16; i++)
      if (!takes[i]) takes[i] = await withLedger(config, (l) => l.take("acme", `acme/r${i % 2}`, `job-${i}`, { owner: 5, repository: 3 }));
    expect(takes.filter(Boolean)).toHaveLength(5);
    expect(await withLedger(config, (l) => l.held(["acme", "other"]))).toEqual(
      new Map([
        ["acme", 5],
        ["other", 0],
      ]),
    );
    // A take again by a holder holds; a new one is refused.
    const holder = `job-${takes.indexOf(true)}`;
    expect(await withLedger(config, (l) => l.take("acme", `acme/r${Number(holder.slice(4)) % 2}`, holder, { owner: 5, repository: 3 }))).toBe(true);
    expect(await withLedger(config, (l) => l.take("acme", "acme/r9", "job-new", { owner: 5 }))).toBe(false);
  });

  it("a repository at its limit refuses, and the owner's place taken for it is given back", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await withLedger(config, async (l) => {
      expect(await l.take("acme", "acme/mono", "constructor", { owner: 10, repository: 1 })).toBe(true);
      expect(await l.take("acme", "acme/mono", "toString", { owner: 10, repository: 1 })).toBe(false);
      expect((await l.held(["acme"])).get("acme")).toBe(1);
      expect(await l.take("acme", "acme/app", "toString", { owner: 10, repository: 1 })).toBe(true);
      await l.release("acme", "acme/mono", "constructor");
      expect((await l.held(["acme"])).get("acme")).toBe(1);
      expect(await l.take("acme", "acme/mono", "job-3", { owner: 10, repository: 1 })).toBe(true);
    });
  });

  it("a limit lowered below the live count takes nothing away and admits nothing new until it is under", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await withLedger(config, async (l) => {
      for (const id of ["a", "b", "c"]) expect(await l.take("acme", "acme/x", id, { owner: 3 })).toBe(true);
      expect(await l.take("acme", "acme/x", "d", { owner: 2 })).toBe(false);
      expect((await l.held(["acme"])).get("acme")).toBe(3);
      await l.release("acme", "acme/x", "a");
      expect(await l.take("acme", "acme/x", "d", { owner: 2 })).toBe(false);
      await l.release("acme", "acme/x", "b");
      expect(await l.take("acme", "acme/x", "d", { owner: 2 })).toBe(true);
    });
  });

  it("a place whose release was lost ends after its lease", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    let clock = Date.now();
    await withLedger(
      config,
      (l) => l.take("acme", "acme/x", "lost", { owner: 1 }),
      () => clock,
    );
    expect(
      await withLedger(
        config,
        (l) => l.take("acme", "acme/x", "next", { owner: 1 }),
        () => clock + 59_999,
      ),
    ).toBe(false);
    clock += 60_001;
    expect(
      await withLedger(
        config,
        (l) => l.take("acme", "acme/x", "next", { owner: 1 }),
        () => clock,
      ),
    ).toBe(true);
  });

  it("a job moved to another owner between attempts: each attempt holds, and gives back, its own owner's place", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const rules = shareRules(parseQuotas(JSON.stringify({ default: { owner: 1 } }), [])!);
    await withLedger(config, async (l) => {
      // Attempt 1 ran in a/x; the repository went to b, and attempt 2 runs in b/x while 1 still lives.
      expect(await takeQuota(l, rules, "gitea-7-1", "a/x")).toBe("taken");
      expect(await takeQuota(l, rules, "gitea-7-2", "B/x")).toBe("taken");
      expect(await takeQuota(l, rules, "gitea-8-1", "a/y")).toBe("refused");
      // Attempt 1 ends: its release names the repository it was admitted for (its placement).
      const admission = withQuotaRelease({ release: async () => true } as unknown as Admission, l);
      await admission.release({ backend: "pod", repository: "a/x" }, "gitea-7-1");
      expect(await l.held(["a", "b"])).toEqual(
        new Map([
          ["a", 0],
          ["b", 1],
        ]),
      );
      expect(await takeQuota(l, rules, "gitea-8-1", "a/y")).toBe("taken");
      expect(await takeQuota(l, rules, "gitea-9-1", "b/z")).toBe("refused");
    });
  });

  it("a take refused at the repository limit keeps the owner place the same id held already", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    await withLedger(config, async (l) => {
      // "same" holds acme's place through acme/app; acme/mono is full with "other".
      expect(await l.take("acme", "acme/app", "same", { owner: 10 })).toBe(true);
      expect(await l.take("acme", "acme/mono", "other", { owner: 10, repository: 1 })).toBe(true);
      expect(await l.take("acme", "acme/mono", "same", { owner: 10, repository: 1 })).toBe(false);
      // Refused, but the place it held before is still its own.
      expect((await l.held(["acme"])).get("acme")).toBe(2);
      expect(await l.take("acme", "acme/app", "same", { owner: 2 })).toBe(true);
      expect(await l.take("acme", "acme/app", "third", { owner: 2 })).toBe(false);
    });
  });

  it("a fresh delivery refused a slot gives its QUOTAS places back (against a dispatcher's pass)", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 1, QUOTAS: JSON.stringify({ default: { owner: 5, repository: 5 } }) });
    const config = await provisionEnv(env);
    const d = createDispatcher({ config, sink: { event: () => undefined, summary: () => undefined, error: () => undefined } });
    for (const [i, id] of ["first", "second"].entries())
      await publishAssignment(d, { ...assignment(id), job: { id: i + 1, runId: 1, attempt: 1, repository: "acme/app" } });
    await d.reconcile("test", 3_000);
    expect(await d.withState(async ({ records }) => [(await records.get("first"))?.state, (await records.get("second"))?.state])).toEqual([
      "backend_ready",
      "capacity_wait",
    ]);
    // Only the job holding the slot holds a place: the refused one gave its owner's and repository's back.
    expect(await withLedger(config, (l) => l.held(["acme"]))).toEqual(new Map([["acme", 1]]));
    expect(
      await withLedger(config, async (l) => [
        await l.take("acme", "acme/app", "x1", { repository: 2 }),
        await l.take("acme", "acme/app", "x2", { repository: 2 }),
      ]),
    ).toEqual([true, false]);
  });
});
