// The cache's v1 routes through app.request, over the in-memory index and blobs: a Gitea runner's
// capability from reserve to download (with Range), a Forgejo proxy's signed requests, and every
// guard by its near miss: another repository's capability on every route, a forged or ended one,
// a forged MAC, a future timestamp, another repository's header, a pull request's isolation key.
// No log line holds a capability, a secret or a signed URL.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Hono } from "hono";
import { capability, forgejoSecret, type Holder } from "../../src/cache/capability.ts";
import { forgejoMac, HEADERS } from "../../src/cache/forgejo-mac.ts";
import { scopesOf } from "../../src/cache/scope.ts";
import { CacheRefusal, type CacheDeps, type CacheJob } from "../../src/cache/service.ts";
import { cacheRoutes } from "../../src/http/cache-routes.ts";
import type { CacheSite } from "../../src/cache/site.ts";
import { memoryBlobs, memoryIndex } from "../harness/cache-memory.ts";

const V = "f".repeat(64);
const key = new Uint8Array(32).fill(9);
const PUBLIC = "https://dispatch.example.org";
const jobs: Record<string, CacheJob | "ended"> = {
  "gitea-1-1": { repo: "org/app", scopes: { read: ["branch:main"], write: "branch:main" }, holder: "gitea-1-1" },
  "gitea-2-1": { repo: "org/other", scopes: { read: ["branch:main"], write: "branch:main" }, holder: "gitea-2-1" },
  "gitea-3-1": "ended",
  "forgejo-5-1": { repo: "org/app", scopes: { read: ["shared"], write: "shared" }, holder: "forgejo-5-1" },
};
const holder = (assignment: string): Holder => ({ assignment, incarnation: "k1" });

let logged: string[];
let counts: Record<string, unknown>[];
let deps: CacheDeps;
beforeEach(() => {
  logged = [];
  counts = [];
  deps = { index: memoryIndex(), blobs: memoryBlobs(), limits: { maxEntryBytes: 2 ** 30, repoBytes: 2 ** 31 }, now: Date.now };
  vi.spyOn(console, "error").mockImplementation((...a: unknown[]) => void logged.push(a.join(" ")));
});
afterEach(() => vi.restoreAllMocks());

const site: CacheSite = {
  key,
  publicUrl: PUBLIC,
  open: (fn) => fn(deps),
  async job(h, signed) {
    const j = jobs[h.assignment];
    if (!j || j === "ended" || h.incarnation !== "k1") throw new CacheRefusal(403, "scope", "cache read denied: this job has ended");
    return signed ? { ...j, scopes: scopesOf({ forge: "forgejo", runId: 0, isolationKey: signed.isolationKey }) } : j;
  },
  secret: (h) => forgejoSecret(key, h),
  now: Date.now,
  log: (e) => void logged.push(JSON.stringify(e)),
  count: (repo, c) => void counts.push({ repo, ...c }),
};
const app = new Hono().route(
  "/",
  cacheRoutes(async () => site),
);
const call = (path: string, init: RequestInit = {}) => app.request(path, init);
const base = async (assignment: string) => `/cache/${await capability(key, holder(assignment))}/_apis/artifactcache`;
const json = (body: unknown, method = "POST") => ({ method, body: JSON.stringify(body), headers: { "content-type": "application/json" } });

async function saveVia(prefix: string, k: string, bytes: Uint8Array, headers: Record<string, string> = {}) {
  const reserved = await call(`${prefix}/caches`, {
    ...json({ key: k, version: V, cacheSize: bytes.length }),
    headers: { ...headers, "content-type": "application/json" },
  });
  expect(reserved.status).toBe(200);
  const { cacheId } = (await reserved.json()) as { cacheId: number };
  const put = await call(`${prefix}/caches/${cacheId}`, {
    method: "PATCH",
    body: bytes,
    headers: { ...headers, "content-type": "application/octet-stream", "content-range": `bytes 0-${bytes.length - 1}/*` },
  });
  expect(put.status).toBe(200);
  const done = await call(`${prefix}/caches/${cacheId}`, { ...json({ size: bytes.length }), headers: { ...headers, "content-type": "application/json" } });
  expect(done.status).toBe(200);
  return cacheId;
}

describe("a Gitea runner's capability", () => {
  it("saves, finds by prefix, and downloads by the signed URL: whole with Content-Length, or from a byte (206)", async () => {
    const prefix = await base("gitea-1-1");
    const bytes = new TextEncoder().encode("0123456789abcdef");
    const id = await saveVia(prefix, "npm-abc", bytes);
    // The commit sent again (its answer lost): done, and neither told nor counted a second time.
    expect((await call(`${prefix}/caches/${id}`, json({ size: 16 }))).status).toBe(200);
    expect(logged.filter((l) => l.includes("cache_saved"))).toHaveLength(1);
    expect((await call(`${prefix}/cache?keys=npm-x,npm-&version=${V}`)).status).toBe(200);
    const hit = (await (await call(`${prefix}/cache?keys=${encodeURIComponent("npm-x,npm-")}&version=${V}`)).json()) as {
      archiveLocation: string;
      cacheKey: string;
    };
    expect(hit.cacheKey).toBe("npm-abc");
    expect(hit.archiveLocation.startsWith(`${PUBLIC}/cache/dl/`)).toBe(true);
    const path = hit.archiveLocation.slice(PUBLIC.length);
    const whole = await call(path);
    expect([whole.status, whole.headers.get("content-length"), await whole.text()]).toEqual([200, "16", "0123456789abcdef"]);
    const part = await call(path, { headers: { range: "bytes=10-" } });
    expect([part.status, part.headers.get("content-range"), await part.text()]).toEqual([206, "bytes 10-15/16", "abcdef"]);
    expect((await call(`${prefix}/cache?keys=pip-&version=${V}`)).status).toBe(204);
    expect((await call(`${prefix}/caches?key=pip-`)).status).toBe(200);
    // Counted for the repository: two hits, a miss, 16 bytes saved, 16 + 6 served.
    expect(counts).toEqual([
      { repo: "org/app", bytesIn: 16 },
      { repo: "org/app", hits: 1 },
      { repo: "org/app", hits: 1 },
      { repo: "org/app", bytesOut: 16 },
      { repo: "org/app", bytesOut: 6 },
      { repo: "org/app", misses: 1 },
    ]);
  });

  it("another repository's capability: a miss, and 404 on the other's entry for chunk, commit and download", async () => {
    const mine = await base("gitea-1-1");
    const id = await saveVia(mine, "k", new TextEncoder().encode("x"));
    const theirs = await base("gitea-2-1");
    expect((await call(`${theirs}/cache?keys=k&version=${V}`)).status).toBe(204);
    const reserved = (await (await call(`${mine}/caches`, json({ key: "k2", version: V, cacheSize: 1 }))).json()) as { cacheId: number };
    expect((await call(`${theirs}/caches/${reserved.cacheId}`, { method: "PATCH", body: "x", headers: { "content-range": "bytes 0-0/*" } })).status).toBe(404);
    expect((await call(`${theirs}/caches/${reserved.cacheId}`, json({ size: 1 }))).status).toBe(404);
    expect(counts.filter((c) => c.refused)).toEqual([
      { repo: "org/other", refused: "not-reserved" },
      { repo: "org/other", refused: "not-reserved" },
    ]);
    const hit = (await (await call(`${mine}/cache?keys=k&version=${V}`)).json()) as { archiveLocation: string };
    const forged = hit.archiveLocation.slice(PUBLIC.length).replace("gitea-1-1", "gitea-2-1");
    expect((await call(forged)).status).toBe(403);
    expect(id).toBeGreaterThan(0);
  });

  it("a forged capability, one of an ended job, or of another incarnation is refused on every route", async () => {
    const good = await capability(key, holder("gitea-1-1"));
    const bad = [
      `${good.slice(0, -1)}${good.endsWith("A") ? "B" : "A"}`,
      await capability(key, holder("gitea-3-1")),
      await capability(key, { assignment: "gitea-1-1", incarnation: "k2" }),
      await capability(new Uint8Array(32).fill(8), holder("gitea-1-1")),
    ];
    for (const cap of bad) {
      const p = `/cache/${cap}/_apis/artifactcache`;
      const answers = [
        await call(`${p}/cache?keys=k&version=${V}`),
        await call(`${p}/caches`, json({ key: "k", version: V })),
        await call(`${p}/caches/5`, { method: "PATCH", body: "x", headers: { "content-range": "bytes 0-0/*" } }),
        await call(`${p}/caches/5`, json({ size: 1 })),
      ];
      expect(answers.map((a) => a.status)).toEqual([403, 403, 403, 403]);
    }
    expect(logged.join("\n")).not.toContain(good);
  });

  it("bad input is a 400 naming the field, with the client's `message`", async () => {
    const p = await base("gitea-1-1");
    const r = await call(`${p}/caches`, json({ key: "a,b", version: V }));
    expect([r.status, ((await r.json()) as { message: string }).message]).toEqual([400, "key: a key may not contain a comma"]);
    expect((await call(`${p}/cache?keys=a&version=zz`)).status).toBe(400);
    expect((await call(`${p}/caches`, { method: "POST", body: "{" })).status).toBe(400);
    expect((await call(`${p}/caches/1`, { method: "PATCH", body: "x", headers: { "content-range": "bytes 0-0" } })).status).toBe(400);
  });
});

describe("a Forgejo runner's proxy", () => {
  const secretOf = (a: string) => forgejoSecret(key, holder(a));
  const signedHeaders = async (secret: string, repo = "org/app", isolationKey = "", ts = String(Math.floor(Date.now() / 1000))) => ({
    [HEADERS.repo]: repo,
    [HEADERS.run]: "77",
    [HEADERS.timestamp]: ts,
    ...(isolationKey ? { [HEADERS.isolationKey]: isolationKey } : {}),
    [HEADERS.mac]: await forgejoMac(secret, repo, "77", ts, isolationKey),
    "Forgejo-Cache-Host": "http://10.0.0.5:4000",
    "Forgejo-Cache-RunId": "r1",
  });
  const root = () => "/_apis/artifactcache";
  const at = (path: string, q = "forgejo-5-1~k1") => `${root()}${path}${path.includes("?") ? "&" : "?"}gdr=${q}`;

  it("the job's own secret signs: a save, then a hit whose archiveLocation goes back through the proxy, and the download through it", async () => {
    const h = await signedHeaders(await secretOf("forgejo-5-1"));
    const reserved = await call(at("/caches"), { method: "POST", body: JSON.stringify({ key: "go-1", version: V, cacheSize: 3 }), headers: h });
    const { cacheId } = (await reserved.json()) as { cacheId: number };
    expect((await call(at(`/caches/${cacheId}`), { method: "PATCH", body: "abc", headers: { ...h, "content-range": "bytes 0-2/*" } })).status).toBe(200);
    expect((await call(at(`/caches/${cacheId}`), { method: "POST", body: JSON.stringify({ size: 3 }), headers: h })).status).toBe(200);
    const hit = (await (await call(at(`/cache?keys=go-&version=${V}`), { headers: h })).json()) as { archiveLocation: string };
    expect(hit.archiveLocation).toBe(`http://10.0.0.5:4000/r1/_apis/artifactcache/artifacts/${cacheId}`);
    const got = await call(at(`/artifacts/${cacheId}`), { headers: h });
    expect([got.status, await got.text()]).toEqual([200, "abc"]);
  });

  it("near misses: a MAC of another job's secret, a future timestamp, another repository's header, no holder", async () => {
    const lookup = (h: Record<string, string>, q?: string) => call(at(`/cache?keys=a&version=${V}`, q), { headers: h });
    expect((await lookup(await signedHeaders(await secretOf("gitea-1-1")))).status).toBe(403);
    expect((await lookup(await signedHeaders(await secretOf("forgejo-5-1"), "org/app", "", String(Math.floor(Date.now() / 1000) + 3600)))).status).toBe(403);
    expect((await lookup(await signedHeaders(await secretOf("forgejo-5-1"), "org/other"))).status).toBe(403);
    expect((await call(`${root()}/cache?keys=a&version=${V}`, { headers: await signedHeaders(await secretOf("forgejo-5-1")) })).status).toBe(403);
    expect(logged.join("\n")).not.toContain(await secretOf("forgejo-5-1"));
  });

  it("a pull request's isolation key writes apart; it reads the shared entries, and the shared reads never see its own", async () => {
    const secret = await secretOf("forgejo-5-1");
    const shared = await signedHeaders(secret);
    const pull = await signedHeaders(secret, "org/app", "refs/pull/12/head");
    const save = async (h: Record<string, string>, k: string) => {
      const { cacheId } = (await (
        await call(at("/caches"), { method: "POST", body: JSON.stringify({ key: k, version: V, cacheSize: 1 }), headers: h })
      ).json()) as {
        cacheId: number;
      };
      await call(at(`/caches/${cacheId}`), { method: "PATCH", body: "z", headers: { ...h, "content-range": "bytes 0-0/*" } });
      expect((await call(at(`/caches/${cacheId}`), { method: "POST", body: JSON.stringify({ size: 1 }), headers: h })).status).toBe(200);
    };
    await save(shared, "dep-main");
    await save(pull, "dep-pr");
    const find = async (h: Record<string, string>) =>
      ((await (await call(at(`/cache?keys=dep-&version=${V}`), { headers: h })).json()) as { cacheKey: string }).cacheKey;
    expect(await find(pull)).toBe("dep-pr");
    expect(await find(shared)).toBe("dep-main");
    // Dropping the isolation key from a pull request's signed headers breaks its MAC.
    const { [HEADERS.isolationKey]: _k, ...dropped } = pull;
    expect((await call(at(`/cache?keys=dep-&version=${V}`), { headers: dropped })).status).toBe(403);
  });
});
