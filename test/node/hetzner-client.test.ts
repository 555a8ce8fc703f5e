// The Hetzner API client (backends/hetzner/client.ts) against the fake: the API's codes reach the
// driver as HetznerError codes, a deleted server's second delete is fine, a list that fails on any
// page is no list, and the rate budget stops reads before creates and every call after a 429,
// without sending them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHetznerApi, HetznerError, RateBudgetExhausted } from "../../src/backends/hetzner/client.ts";
import type { RateState } from "../../src/backends/hetzner/rate-budget.ts";
import { FAKE_HCLOUD_TOKEN, startFakeHetzner } from "../../scripts/fake-hetzner.mjs";

let fake: Awaited<ReturnType<typeof startFakeHetzner>>;
beforeAll(async () => void (fake = await startFakeHetzner()));
afterAll(() => fake.close());

let n = 0;
function project() {
  const url = `${fake.url}/client${++n}`;
  const budget: { state: RateState | undefined } = { state: undefined };
  const api = createHetznerApi({ url, token: FAKE_HCLOUD_TOKEN, budget });
  const control = async (what: string, body?: unknown) =>
    (await fetch(`${url}/_control/${what}`, body === undefined ? {} : { method: "POST", body: JSON.stringify(body) })).json() as Promise<{
      requests: unknown[];
    }>;
  return { api, budget, control };
}
const signal = () => AbortSignal.timeout(5_000);
const body = (name: string, extra: object = {}) => ({
  name,
  server_type: "cx22",
  image: "ubuntu-24.04",
  location: "fsn1",
  labels: { "managed-by": "gdr", i: "x" },
  ...extra,
});
const codeOf = async (p: Promise<unknown>) => {
  try {
    await p;
    return "none";
  } catch (err) {
    return err instanceof HetznerError ? `${err.status} ${err.code}` : String(err);
  }
};

describe("the Hetzner API client", () => {
  it("creates; a second create of the name is uniqueness_error, and the server is found by its name", async () => {
    const { api } = project();
    const created = await api.create(body("s-1"), signal());
    expect(created).toMatchObject({ name: "s-1", labels: { "managed-by": "gdr" } });
    expect(await codeOf(api.create(body("s-1"), signal()))).toBe("409 uniqueness_error");
    expect((await api.byName("s-1", signal()))?.id).toBe(created.id);
    expect(await api.byName("s-2", signal())).toBeNull();
    await api.remove(created.id, signal());
    await api.remove(created.id, signal());
    expect(await api.get(created.id, signal())).toBeNull();
  });

  it("gives the driver the API's codes for no room and a full project", async () => {
    const { api, control } = project();
    await control("mode", { unavailable: [{ location: "fsn1" }], placementError: [{ location: "hel1" }], serverLimit: 1 });
    expect(await codeOf(api.create(body("a"), signal()))).toBe("412 resource_unavailable");
    expect(await codeOf(api.create(body("a", { location: "hel1" }), signal()))).toBe("412 placement_error");
    expect(await codeOf(api.create(body("a", { location: "nbg1" }), signal()))).toBe("none");
    expect(await codeOf(api.create(body("b", { location: "nbg1" }), signal()))).toBe("403 resource_limit_exceeded");
  });

  it("lists every page; a page that fails in the middle makes no list at all", async () => {
    const { api, control } = project();
    for (let i = 0; i < 120; i++) await api.create(body(`s-${i}`), signal());
    expect((await api.listAll("managed-by=gdr,i=x", signal())).map((s) => s.name).sort()).toHaveLength(120);
    await control("mode", { failCalls: [2] });
    expect(await codeOf(api.listAll("managed-by=gdr", signal()))).toBe("500 server_error");
    // The next sweep reads it whole again.
    expect(await api.listAll("managed-by=gdr", signal())).toHaveLength(120);
  });

  it("the budget stops reads first, creates next, deletes last, and every call after a 429, sending none of them", async () => {
    const { api, budget, control } = project();
    const s = await api.create(body("kept"), signal());
    await control("mode", { rateRemaining: 10 });
    await api.get(s.id, signal());
    expect(Math.floor(budget.state!.remaining)).toBe(9);
    const sent = (await control("state")).requests.length;
    await expect(api.get(s.id, signal())).rejects.toBeInstanceOf(RateBudgetExhausted);
    await expect(api.listAll("managed-by=gdr", signal())).rejects.toBeInstanceOf(RateBudgetExhausted);
    expect((await control("state")).requests).toHaveLength(sent);
    // Creates still go above the deletes' reserve; deletes go to the last request.
    await api.create(body("one-more"), signal());
    await api.remove(s.id, signal());
    // The API's own 429 stops every call, deletes too, until a request has come back.
    await control("mode", { rateRemaining: 0 });
    budget.state = undefined;
    await expect(api.remove(s.id, signal())).rejects.toBeInstanceOf(RateBudgetExhausted);
    const after429 = (await control("state")).requests.length;
    await expect(api.remove(s.id, signal())).rejects.toBeInstanceOf(RateBudgetExhausted);
    expect((await control("state")).requests).toHaveLength(after429);
  });
});

describe("calls at once", () => {
  it("count against the budget before their answers: of two creates with one left above the reserve, the second is not sent", async () => {
    const { api, budget, control } = project();
    await api.create(body("first"), signal());
    await control("mode", { rateRemaining: 6 });
    await api.byName("first", signal());
    budget.state = { ...budget.state!, remaining: 6 };
    const sent = (await control("state")).requests.length;
    const both = await Promise.allSettled([api.create(body("a"), signal()), api.create(body("b"), signal())]);
    expect(both.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    expect((both.find((r) => r.status === "rejected") as PromiseRejectedResult).reason).toBeInstanceOf(RateBudgetExhausted);
    expect((await control("state")).requests.length).toBe(sent + 1);
  });
});
