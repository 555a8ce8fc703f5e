// QUOTAS around admission (quotas/limits.ts) over an in-memory ledger: what a job takes and gives
// back, an owner's names in any case as one owner, a lowered limit that takes no place away but
// admits none until under it, and releases that give places back only where a repository is named.
import { describe, expect, it } from "vitest";
import { parseQuotas, shareRules } from "../../src/quotas/config.ts";
import { releaseQuota, takeQuota, withQuotaRelease } from "../../src/quotas/limits.ts";
import type { Admission } from "../../src/state/admission.ts";
import { memoryLedger } from "../harness/memory.ts";

const rules = (quotas: unknown) => {
  const problems: string[] = [];
  const parsed = parseQuotas(JSON.stringify(quotas), problems);
  if (!parsed) throw new Error(problems.join("; "));
  return shareRules(parsed);
};

describe("takeQuota and releaseQuota", () => {
  it("takes nothing where no limit applies, or for a job with no repository", async () => {
    const ledger = memoryLedger();
    expect(await takeQuota(ledger, rules({}), "j1", "acme/app")).toBe("none");
    expect(await takeQuota(ledger, rules({ default: { owner: 1 } }), "j2", undefined)).toBe("none");
    expect([...ledger.places.values()].every((s) => s.size === 0)).toBe(true);
  });

  it("holds an owner's limit across repositories, counting Acme and acme as one owner; the one below the limit is taken", async () => {
    const ledger = memoryLedger();
    const r = rules({ owners: { acme: { limit: 2 } } });
    expect(await takeQuota(ledger, r, "j1", "acme/app")).toBe("taken");
    expect(await takeQuota(ledger, r, "j2", "Acme/Web")).toBe("taken");
    expect(await takeQuota(ledger, r, "j3", "ACME/app")).toBe("refused");
    expect(await takeQuota(ledger, r, "j1", "acme/app")).toBe("taken"); // a job that holds its place takes it again
    expect(await takeQuota(ledger, r, "o1", "other/app")).toBe("none");
  });

  it("an owner named like an Object member is an owner like any other", async () => {
    const ledger = memoryLedger();
    const r = rules({ owners: { constructor: { limit: 1 } } });
    expect(await takeQuota(ledger, r, "j1", "constructor/app")).toBe("taken");
    expect(await takeQuota(ledger, r, "j2", "constructor/app")).toBe("refused");
  });

  it("a lowered limit takes no place away, and admits no new job until the owner is under it", async () => {
    const ledger = memoryLedger();
    for (const id of ["j1", "j2", "j3"]) expect(await takeQuota(ledger, rules({ owners: { acme: { limit: 3 } } }), id, "acme/app")).toBe("taken");
    const lowered = rules({ owners: { acme: { limit: 2 } } });
    expect(await takeQuota(ledger, lowered, "j4", "acme/app")).toBe("refused");
    expect(await ledger.held(["acme"])).toEqual(new Map([["acme", 3]]));
    await releaseQuota(ledger, "j1", "acme/app");
    expect(await takeQuota(ledger, lowered, "j4", "acme/app")).toBe("refused");
    await releaseQuota(ledger, "j2", "ACME/app");
    expect(await takeQuota(ledger, lowered, "j4", "acme/app")).toBe("taken");
  });
});

describe("withQuotaRelease", () => {
  const admission = (released: string[]) =>
    ({
      release: async (_place: unknown, ...ids: string[]) => (released.push(...ids), false),
      releaseAgain: async (_place: unknown, ...ids: string[]) => void released.push(...ids.map((id) => `${id} again`)),
    }) as unknown as Admission;

  it("gives a job's places back with its slot where the placement names its repository; not for a backend alone", async () => {
    const ledger = memoryLedger();
    const r = rules({ owners: { acme: { limit: 1 } } });
    await takeQuota(ledger, r, "j1", "acme/app");
    const released: string[] = [];
    const wrapped = withQuotaRelease(admission(released), ledger);
    await wrapped.release("pod", "j1");
    await wrapped.release({ backend: "pod" }, "j1");
    expect(await takeQuota(ledger, r, "j2", "acme/app")).toBe("refused");
    await wrapped.release({ backend: "pod", repository: "acme/app" }, "j1");
    expect(released).toEqual(["j1", "j1", "j1"]);
    expect(await takeQuota(ledger, r, "j2", "acme/app")).toBe("taken");
  });

  it("a repeated end gives them back too (its first release may have failed before the ledger was reached)", async () => {
    const ledger = memoryLedger();
    const r = rules({ owners: { acme: { limit: 1 } } });
    await takeQuota(ledger, r, "j1", "acme/app");
    const released: string[] = [];
    const wrapped = withQuotaRelease(admission(released), ledger);
    await wrapped.releaseAgain({ backend: "pod" }, "j1");
    expect(await takeQuota(ledger, r, "j2", "acme/app")).toBe("refused");
    await wrapped.releaseAgain({ backend: "pod", repository: "acme/app" }, "j1");
    expect(released).toEqual(["j1 again", "j1 again"]);
    expect(await takeQuota(ledger, r, "j2", "acme/app")).toBe("taken");
  });
});
