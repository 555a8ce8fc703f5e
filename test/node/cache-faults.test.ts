// R2 failing under the real client: @actions/cache 6.3.0 against the cache's routes served over
// HTTP from Node, on the in-memory index and an R2 stand-in told to fail its puts, its completes or
// its gets. The Worker answers 503 (which the client tries again, 3 times), so a failure that
// passes costs nothing, and one that lasts fails that one save or restore only: the client warns,
// the job goes on, nothing half-written is found, and the next save or restore works.
import { createServer, type Server } from "node:http";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import * as cache from "@actions/cache";
import { capability } from "../../src/cache/capability.ts";
import type { Blobs } from "../../src/cache/blobs.ts";
import type { CacheSite } from "../../src/cache/site.ts";
import type { CacheDeps } from "../../src/cache/service.ts";
import { cacheRoutes } from "../../src/http/cache-routes.ts";
import { memoryBlobs, memoryIndex } from "../harness/cache-memory.ts";

const key = new Uint8Array(32).fill(3);
/** How many more R2 calls of the named kind fail. */
const failing = { times: 0, what: "putPart" as "putPart" | "finish" | "read" };
const r2 = memoryBlobs();
const fails = <K extends typeof failing.what>(what: K): Blobs[K] =>
  ((...a: never[]) =>
    failing.what === what && failing.times > 0
      ? (failing.times--, Promise.reject(new Error("R2 failed")))
      : (r2[what] as (...x: never[]) => Promise<unknown>)(...a)) as unknown as Blobs[K];
const blobs: Blobs = { ...r2, putPart: fails("putPart"), finish: fails("finish"), read: fails("read") };
const deps: CacheDeps = { index: memoryIndex(), blobs, limits: { maxEntryBytes: 2 ** 30, repoBytes: 2 ** 31 }, now: Date.now };
const work = mkdtempSync(join(tmpdir(), "gdr-cache-faults-"));
let server: Server;
let url: string;
beforeAll(async () => {
  let publicUrl = "";
  const site: CacheSite = {
    key,
    get publicUrl() {
      return publicUrl;
    },
    open: (fn) => fn(deps),
    job: async (h) => ({ repo: "org/app", scopes: { read: ["branch:main"], write: "branch:main" }, holder: h.assignment }),
    secret: async () => "",
    now: Date.now,
    log: () => undefined,
    count: () => undefined,
  };
  const app = new Hono().route(
    "/",
    cacheRoutes(async () => site),
  );
  server = createServer((req, res) => {
    const body = req.method === "GET" || req.method === "HEAD" ? undefined : (Readable.toWeb(req) as ReadableStream<Uint8Array>);
    const request = new Request(`${publicUrl}${req.url}`, {
      method: req.method,
      headers: req.headers as Record<string, string>,
      body,
      duplex: "half",
    } as RequestInit);
    void (async () => {
      const answer = await app.fetch(request);
      res.writeHead(answer.status, Object.fromEntries(answer.headers));
      if (answer.body) for await (const chunk of answer.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      res.end();
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address() as { port: number };
  publicUrl = `http://127.0.0.1:${address.port}`;
  url = `${publicUrl}/cache/${await capability(key, { assignment: "gitea-1-1", incarnation: "k1" })}/`;
});
afterAll(() => {
  server?.close();
  rmSync(work, { recursive: true, force: true });
});

/**
 * Runs `fn` as a job's step with the cache variables act_runner sets; what the client said of a
 * failure (::warning:: or ::error:: annotations; neither fails the step, and saveCache returns the
 * reserved cacheId even when the upload failed).
 */
async function asJob<T>(fn: () => Promise<T>): Promise<{ value: T; warned: string }> {
  const saved = { ...process.env };
  Object.assign(process.env, { ACTIONS_CACHE_URL: url, ACTIONS_RUNTIME_TOKEN: "t", GITHUB_SERVER_URL: "https://gitea.example.org", RUNNER_TEMP: work });
  const said: string[] = [];
  const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => (said.push(String(chunk)), true));
  try {
    return { value: await fn(), warned: said.filter((l) => /^::(warning|error)::/.test(l)).join("") };
  } finally {
    spy.mockRestore();
    process.env = saved;
  }
}

const dir = join(work, "deps");
const file = join(dir, "f.txt");
const write = (text: string) => (mkdirSync(dir, { recursive: true }), writeFileSync(file, text));

describe("R2 failing, under @actions/cache 6.3.0", () => {
  it("a put failing once is tried again and the save completes; failing on every try fails that save only, and the next one saves", async () => {
    write("one");
    Object.assign(failing, { times: 1, what: "putPart" });
    const once = await asJob(() => cache.saveCache([dir], "once"));
    expect(once.warned).toBe("");
    expect((await asJob(() => cache.restoreCache([dir], "once"))).value).toBe("once");
    Object.assign(failing, { times: 1000, what: "putPart" });
    const lasting = await asJob(() => cache.saveCache([dir], "lasting"));
    expect(lasting.warned).toContain("Failed to save: uploadChunk (start: 0, end: ");
    Object.assign(failing, { times: 0 });
    expect((await asJob(() => cache.restoreCache([dir], "lasting"))).value).toBeUndefined();
    write("two");
    expect((await asJob(() => cache.saveCache([dir], "after"))).value).toBeGreaterThan(0);
    write("");
    expect((await asJob(() => cache.restoreCache([dir], "after"))).value).toBe("after");
    expect(readFileSync(file, "utf8")).toBe("two");
  }, 60_000);

  it("a complete failing on every try fails that save, with nothing found", async () => {
    write("three");
    Object.assign(failing, { times: 1000, what: "finish" });
    expect((await asJob(() => cache.saveCache([dir], "uncommitted"))).warned).toContain("Failed to save: commitCache failed: Cache service responded with 503");
    Object.assign(failing, { times: 0 });
    expect((await asJob(() => cache.restoreCache([dir], "uncommitted"))).value).toBeUndefined();
  }, 60_000);

  it("a get failing on every try fails that restore only (a warning, no files); the next restore has them", async () => {
    write("four");
    expect((await asJob(() => cache.saveCache([dir], "kept"))).value).toBeGreaterThan(0);
    rmSync(dir, { recursive: true });
    Object.assign(failing, { times: 1000, what: "read" });
    const failed = await asJob(() => cache.restoreCache([dir], "kept"));
    expect(failed.value).toBeUndefined();
    expect(failed.warned).toContain("Failed to restore: downloadCache failed: Cache service responded with 503");
    Object.assign(failing, { times: 0 });
    expect((await asJob(() => cache.restoreCache([dir], "kept"))).value).toBe("kept");
    expect(readFileSync(file, "utf8")).toBe("four");
  }, 60_000);
});
