// The fake Hetzner Cloud API keeps the real contract: what it answers validates against Hetzner's
// own OpenAPI description, and it refuses what the real API refuses (unknown server types, bad
// labels, user_data over 32 KiB, duplicate names), pages by at most 50, sends the rate-limit headers
// and answers 429 past the limit, and can be made to fail as the real one does.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkAgainst } from "../../src/backends/api-schema.ts";
import hcloud from "../../src/backends/hetzner/upstream/hcloud-servers.json" with { type: "json" };
import { FAKE_HCLOUD_TOKEN, startFakeHetzner } from "../../scripts/fake-hetzner.mjs";

let fake: Awaited<ReturnType<typeof startFakeHetzner>>;
beforeAll(async () => void (fake = await startFakeHetzner()));
afterAll(() => fake.close());

// The API's answers, read by path in the assertions as the JSON they are.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Answer = Record<string, any>;

let n = 0;
function project() {
  const base = `${fake.url}/p${++n}`;
  const call = async (method: string, path: string, body?: unknown, token = FAKE_HCLOUD_TOKEN) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    return { status: res.status, headers: res.headers, body: (await res.json()) as Answer };
  };
  const control = async (what: string, body?: unknown) =>
    (await fetch(`${base}/_control/${what}`, body === undefined ? {} : { method: "POST", body: JSON.stringify(body) })).json() as Promise<Answer>;
  return { call, control };
}
const valid = (ref: string, value: unknown) => expect(checkAgainst(hcloud, ref, value)).toEqual([]);
const server = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  server_type: "cx22",
  image: "ubuntu-24.04",
  location: "fsn1",
  labels: { "managed-by": "gdr" },
  ...extra,
});

describe("the fake Hetzner Cloud API", () => {
  it("creates, reads, lists, rebuilds and deletes servers with answers the OpenAPI description accepts", async () => {
    const { call } = project();
    const created = await call("POST", "/servers", server("gdr-gitea-1-1", { user_data: "#cloud-config\n" }));
    expect(created.status).toBe(201);
    valid("create_server_response", created.body);
    const id = created.body.server.id;
    expect(created.body.server).toMatchObject({
      name: "gdr-gitea-1-1",
      labels: { "managed-by": "gdr" },
      server_type: { name: "cx22" },
      location: { name: "fsn1" },
    });
    const got = await call("GET", `/servers/${id}`);
    valid("get_server_response", got.body);
    expect(got.body.server.status).toBe("running");
    const listed = await call("GET", "/servers?label_selector=managed-by%3Dgdr");
    valid("list_servers_response", listed.body);
    expect(listed.body.servers.map((s: { id: number }) => s.id)).toEqual([id]);
    const rebuilt = await call("POST", `/servers/${id}/actions/rebuild`, { image: "ubuntu-24.04" });
    expect(rebuilt.status).toBe(201);
    valid("rebuild_server_from_image_response", rebuilt.body);
    const action = await call("GET", `/actions/${rebuilt.body.action.id}`);
    valid("get_action_response", action.body);
    const deleted = await call("DELETE", `/servers/${id}`);
    valid("delete_server_response", deleted.body);
    const gone = await call("GET", `/servers/${id}`);
    expect(gone.status).toBe(404);
    valid("error_response", gone.body);
    expect(gone.body.error.code).toBe("not_found");
  });

  it("refuses what the real API refuses, with its codes: a duplicate name, an unknown type, a bad label, user_data over 32 KiB, a wrong token", async () => {
    const { call } = project();
    expect((await call("POST", "/servers", server("a"))).status).toBe(201);
    const twice = await call("POST", "/servers", server("a"));
    expect([twice.status, twice.body.error.code]).toEqual([409, "uniqueness_error"]);
    const cases: [Record<string, unknown>, string][] = [
      [server("b", { server_type: "cx99" }), "server_type"],
      [server("c", { labels: { k: "-starts-with-dash" } }), "labels"],
      [server("d", { labels: { "bad key!": "v" } }), "labels"],
      [server("e", { user_data: "x".repeat(32 * 1024 + 1) }), "user_data"],
      [server("f_g"), "name"],
      [server("h", { location: "mars1" }), "location"],
      [{ ...server("i"), unknown_field: 1 }, "unknown_field"],
    ];
    for (const [body, field] of cases) {
      const res = await call("POST", "/servers", body);
      expect([res.status, res.body.error.code], field).toEqual([422, "invalid_input"]);
      expect(JSON.stringify(res.body.error.details), field).toContain(field);
      valid("error_response", res.body);
    }
    // The near misses are taken: exactly 32 KiB, a label value of 63 characters, an empty one.
    expect((await call("POST", "/servers", server("j", { user_data: "x".repeat(32 * 1024), labels: { k: "v".repeat(63), e: "" } }))).status).toBe(201);
    expect((await call("GET", "/servers", undefined, `${FAKE_HCLOUD_TOKEN}x`)).status).toBe(401);
    expect((await call("POST", "/servers", "{not json")).body.error.code).toBe("json_error");
  });

  it("pages at most 50 a page with meta.pagination, and filters by name and label selector", async () => {
    const { call } = project();
    for (let i = 0; i < 60; i++) await call("POST", "/servers", server(`s-${i}`, { labels: { "managed-by": "gdr", pool: i % 2 ? "odd" : "even" } }));
    const first = await call("GET", "/servers?per_page=100");
    expect(first.body.servers).toHaveLength(50);
    expect(first.body.meta.pagination).toEqual({ page: 1, per_page: 50, previous_page: null, next_page: 2, last_page: 2, total_entries: 60 });
    const second = await call("GET", "/servers?per_page=50&page=2");
    expect(second.body.servers).toHaveLength(10);
    expect(second.body.meta.pagination.next_page).toBeNull();
    expect((await call("GET", "/servers?label_selector=pool%3Dodd&per_page=50")).body.servers).toHaveLength(30);
    expect((await call("GET", "/servers?label_selector=pool!%3Dodd,managed-by&per_page=50")).body.servers).toHaveLength(30);
    expect((await call("GET", "/servers?label_selector=pool%20in%20(odd,even)&per_page=50")).body.meta.pagination.total_entries).toBe(60);
    expect((await call("GET", "/servers?label_selector=!pool")).body.servers).toHaveLength(0);
    expect((await call("GET", "/servers?name=s-7")).body.servers.map((s: { name: string }) => s.name)).toEqual(["s-7"]);
  });

  it("lists server types (where each is sold), locations and images (one name per architecture, the project's snapshots by id) as the OpenAPI description says", async () => {
    const { call, control } = project();
    await control("image", { image: 4242 });
    const types = await call("GET", "/server_types?per_page=50");
    valid("list_server_types_response", types.body);
    const cax = types.body.server_types.find((t: Answer) => t.name === "cax11");
    expect([cax.architecture, cax.locations.map((l: Answer) => l.name), cax.prices.map((p: Answer) => p.location)]).toEqual([
      "arm",
      ["fsn1", "nbg1", "hel1"],
      ["fsn1", "nbg1", "hel1"],
    ]);
    const locations = await call("GET", "/locations");
    valid("list_locations_response", locations.body);
    expect(locations.body.locations.map((l: Answer) => l.name)).toEqual(["fsn1", "nbg1", "hel1", "ash", "hil", "sin"]);
    const images = await call("GET", "/images?status=available&include_deprecated=true&per_page=50");
    valid("list_images_response", images.body);
    const ubuntu = images.body.images.filter((i: Answer) => i.name === "ubuntu-24.04").map((i: Answer) => i.architecture);
    expect(ubuntu).toEqual(["x86", "arm"]);
    expect(images.body.images.find((i: Answer) => i.id === 4242)).toMatchObject({ type: "snapshot", name: null });
    expect((await call("GET", "/images?type=snapshot")).body.images.map((i: Answer) => i.id)).toEqual([4242]);
    expect((await call("GET", "/images?name=debian-13&architecture=arm")).body.images).toHaveLength(1);
    expect((await call("GET", "/server_types?name=cx999")).body.server_types).toEqual([]);
    // A snapshot the project has is one it can create from.
    expect((await call("POST", "/servers", server("from-snapshot", { image: "4242" }))).status).toBe(201);
  });

  it("sends RateLimit-* on every answer, 429 past the limit, and serves again once time has refilled the budget", async () => {
    const { call, control } = project();
    const ok = await call("GET", "/servers");
    expect(ok.headers.get("ratelimit-limit")).toBe("3600");
    expect(Number(ok.headers.get("ratelimit-remaining"))).toBe(3599);
    await control("mode", { rateRemaining: 1 });
    expect((await call("GET", "/servers")).status).toBe(200);
    const limited = await call("GET", "/servers");
    expect([limited.status, limited.body.error.code]).toEqual([429, "rate_limit_exceeded"]);
    expect(limited.headers.get("ratelimit-remaining")).toBe("0");
    const reset = Number(limited.headers.get("ratelimit-reset"));
    expect(reset * 1000).toBeGreaterThan(Date.now());
    await control("clock", { advanceMs: 2_000 });
    expect((await call("GET", "/servers")).status).toBe(200);
  });

  it("can be made to fail as the real one does: no room, the project's limit, 5xx, a boot that takes time", async () => {
    const { call, control } = project();
    await control("mode", { unavailable: [{ server_type: "cx22", location: "fsn1" }], serverLimit: 2, bootMs: 60_000 });
    const full = await call("POST", "/servers", server("a"));
    expect([full.status, full.body.error.code]).toEqual([412, "resource_unavailable"]);
    expect((await call("POST", "/servers", server("a", { location: "nbg1" }))).status).toBe(201);
    expect((await call("POST", "/servers", server("b", { location: "nbg1" }))).status).toBe(201);
    const limit = await call("POST", "/servers", server("c", { location: "nbg1" }));
    expect([limit.status, limit.body.error.code]).toEqual([403, "resource_limit_exceeded"]);
    expect((await call("GET", "/servers?name=a")).body.servers[0].status).toBe("initializing");
    await control("mode", { failFirst: 1 });
    expect((await call("GET", "/servers")).status).toBe(500);
    expect((await call("GET", "/servers")).status).toBe(200);
  });

  it("bills each server by the started hour from creation to deletion, whatever it did", async () => {
    const { call, control } = project();
    const a = (await call("POST", "/servers", server("a"))).body.server.id;
    await control("clock", { advanceMs: 5 * 60_000 });
    await call("DELETE", `/servers/${a}`);
    const b = (await call("POST", "/servers", server("b"))).body.server.id;
    await control("clock", { advanceMs: 61 * 60_000 });
    await call("POST", `/servers/${b}/actions/rebuild`, { image: "ubuntu-24.04" });
    // a: 5 minutes, 1 hour; b: 61 minutes and running, 2 hours.
    expect(await control("billing")).toEqual({ servers: 2, billedHours: 3, running: 1 });
  });
});
