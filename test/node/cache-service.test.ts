// The cache's operations over in-memory stand-ins of its index and R2 (test/harness/cache-memory.ts):
// a save in chunks out of order, then a restore of the same bytes; one winner of two reserves; the
// repository and scope guards by their near misses; the commit check; and the upkeep after a Worker
// killed mid-upload or mid-commit, over a quota, and with an object its entry outlived.
import { describe, expect, it } from "vitest";
import { blobKey } from "../../src/cache/blobs.ts";
import { maintainCache, ORPHAN_GRACE_MS, overQuota, STALE_RESERVATION_MS, UNSTARTED_RESERVATION_MS } from "../../src/cache/maintain.ts";
import { MiB } from "../../src/cache/parts.ts";
import { CacheRefusal, commitEntry, lookupEntry, readEntry, reserveEntry, uploadChunk, type CacheDeps, type CacheJob } from "../../src/cache/service.ts";
import { memoryBlobs, memoryIndex } from "../harness/cache-memory.ts";
import type { CacheEntry } from "../../src/cache/index-store.ts";

const V = "c".repeat(64);
const S = 5 * MiB;
const main: CacheJob = { repo: "org/app", scopes: { read: ["branch:main"], write: "branch:main" }, holder: "gitea-1-1" };
const pr: CacheJob = { repo: "org/app", scopes: { read: ["run:9", "branch:main"], write: "run:9" }, holder: "gitea-2-1" };
const other: CacheJob = { repo: "org/other", scopes: main.scopes, holder: "gitea-3-1" };

function scene(limits = { maxEntryBytes: 100 * MiB, repoBytes: 200 * MiB }) {
  const clock = { t: 1_000_000 };
  const blobs = memoryBlobs(() => clock.t);
  const d: CacheDeps = { index: memoryIndex(), blobs, limits, now: () => clock.t };
  return { d, blobs, clock };
}
const archive = (size: number, seed = 1) => {
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i++) out[i] = (i * 31 + seed) & 0xff;
  return out;
};
const same = (a: Uint8Array | undefined, b: Uint8Array) => !!a && Buffer.from(a).equals(Buffer.from(b));
const stream = (bytes: Uint8Array) => new Response(bytes).body!;
const refusal = async (p: Promise<unknown>) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CacheRefusal);
  const r = err as CacheRefusal;
  return { status: r.status, reason: r.reason, message: r.message };
};

/** Saves `bytes` under `key` as the client does: every chunk S bytes but the last, sent in `order`. */
async function save(d: CacheDeps, job: CacheJob, key: string, bytes: Uint8Array, order?: number[]) {
  const id = await reserveEntry(d, job, { key, version: V, cacheSize: bytes.length });
  const n = Math.ceil(bytes.length / S);
  for (const k of order ?? [...Array(n).keys()]) {
    const start = k * S;
    const end = Math.min(start + S, bytes.length) - 1;
    await uploadChunk(d, job, id, { start, end }, stream(bytes.slice(start, end + 1)));
  }
  await commitEntry(d, job, id, bytes.length);
  return id;
}
const restore = async (d: CacheDeps, job: CacheJob, ...keys: string[]) => {
  const entry = await lookupEntry(d, job, { keys, version: V });
  if (!entry) return undefined;
  const blob = await readEntry(d, job.repo, entry.id);
  return { key: entry.key, bytes: new Uint8Array(await new Response(blob!.body).arrayBuffer()) };
};

describe("a save and a restore", () => {
  it("chunks in any order make one object; a restore reads the same bytes, by its key or a prefix", async () => {
    const { d } = scene();
    const bytes = archive(2 * S + 12345);
    await save(d, main, "npm-abc", bytes, [1, 0, 2]);
    const got = await restore(d, main, "npm-abc");
    expect([got?.key, same(got?.bytes, bytes), got?.bytes.length]).toEqual(["npm-abc", true, bytes.length]);
    expect((await restore(d, main, "npm-x", "npm-"))?.key).toBe("npm-abc");
    expect(await restore(d, main, "pip-")).toBeUndefined();
  });

  it("an entry is not found until its commit; a second reserve of a name is refused, whichever state the first is in", async () => {
    const { d } = scene();
    const id = await reserveEntry(d, main, { key: "k", version: V, cacheSize: 10 });
    expect(await refusal(reserveEntry(d, main, { key: "k", version: V, cacheSize: 10 }))).toMatchObject({
      status: 409,
      message: "another job is saving this key",
    });
    await uploadChunk(d, main, id, { start: 0, end: 9 }, stream(archive(10)));
    expect(await lookupEntry(d, main, { keys: ["k"], version: V })).toBeUndefined();
    await commitEntry(d, main, id, 10);
    expect((await lookupEntry(d, main, { keys: ["k"], version: V }))?.id).toBe(id);
    expect(await refusal(reserveEntry(d, main, { key: "k", version: V }))).toMatchObject({ status: 409, message: expect.stringContaining("immutable") });
  });

  it("two reserves of one key at once: one cacheId, one 409", async () => {
    const { d } = scene();
    const both = await Promise.allSettled([reserveEntry(d, main, { key: "k", version: V }), reserveEntry(d, main, { key: "k", version: V })]);
    expect(both.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
  });
});

describe("guards", () => {
  it("another repository finds nothing and may not write: 404 on its chunks and its commit", async () => {
    const { d } = scene();
    await save(d, main, "k", archive(100));
    expect(await lookupEntry(d, other, { keys: ["k"], version: V })).toBeUndefined();
    const id = await reserveEntry(d, main, { key: "k2", version: V, cacheSize: 10 });
    expect(await refusal(uploadChunk(d, other, id, { start: 0, end: 9 }, stream(archive(10))))).toMatchObject({ status: 404 });
    expect(await refusal(commitEntry(d, other, id, 10))).toMatchObject({ status: 404 });
    expect(await readEntry(d, other.repo, id)).toBeUndefined();
  });

  it("an entry kept under this repository whose record names another (a corrupt or colliding key) is never served nor written", async () => {
    const { d } = scene();
    const index = memoryIndex();
    const deps = { ...d, index };
    await save(deps, main, "k", archive(10));
    const reserved = await reserveEntry(deps, main, { key: "r", version: V, cacheSize: 10 });
    for (const row of index.rows.values()) row.value.repo = other.repo;
    expect(await lookupEntry(deps, main, { keys: ["k"], version: V })).toBeUndefined();
    const committed = [...index.rows.values()].find((r) => r.value.key === "k")!.value.id;
    expect(await readEntry(deps, main.repo, committed)).toBeUndefined();
    expect(await refusal(uploadChunk(deps, main, reserved, { start: 0, end: 9 }, stream(archive(10))))).toMatchObject({ status: 404 });
    expect(await refusal(commitEntry(deps, main, reserved, 10))).toMatchObject({ status: 404 });
  });

  it("a pull request's job reads the default branch's entries but writes only its own scope; the default branch never restores them", async () => {
    const { d } = scene();
    await save(d, main, "k-main", archive(100));
    expect((await restore(d, pr, "k-"))?.key).toBe("k-main");
    await save(d, pr, "k-pr", archive(100, 2));
    expect((await restore(d, main, "k-"))?.key).toBe("k-main");
    expect((await restore(d, pr, "k-"))?.key).toBe("k-pr");
    const theirs = await reserveEntry(d, main, { key: "k-main-2", version: V, cacheSize: 10 });
    expect(await refusal(uploadChunk(d, pr, theirs, { start: 0, end: 9 }, stream(archive(10))))).toMatchObject({ status: 403, reason: "scope" });
  });

  it("limits at reserve name their variable; a chunk under 5 MiB says what to set; the short last chunk first waits (503)", async () => {
    const { d } = scene({ maxEntryBytes: 50, repoBytes: 40 });
    expect((await refusal(reserveEntry(d, main, { key: "a", version: V, cacheSize: 51 }))).message).toContain("CACHE_MAX_ENTRY_BYTES = 50");
    expect((await refusal(reserveEntry(d, main, { key: "a", version: V, cacheSize: 41 }))).message).toContain("CACHE_REPO_BYTES = 40");
    const big = scene().d;
    const id = await reserveEntry(big, main, { key: "b", version: V, cacheSize: 3 * MiB });
    expect(await refusal(uploadChunk(big, main, id, { start: 0, end: MiB - 1 }, stream(archive(MiB))))).toMatchObject({
      status: 400,
      message: expect.stringContaining("CACHE_UPLOAD_CHUNK_SIZE to at least 5"),
    });
    const id2 = await reserveEntry(big, main, { key: "c", version: V, cacheSize: S + 10 });
    expect(await refusal(uploadChunk(big, main, id2, { start: S, end: S + 9 }, stream(archive(10))))).toMatchObject({ status: 503 });
  });

  it("a commit whose size, or whose chunks, do not check out is refused, and the entry stays unseen", async () => {
    const { d } = scene();
    const id = await reserveEntry(d, main, { key: "k", version: V, cacheSize: S + 10 });
    await uploadChunk(d, main, id, { start: 0, end: S - 1 }, stream(archive(S)));
    expect((await refusal(commitEntry(d, main, id, S + 10))).message).toContain("do not cover");
    await uploadChunk(d, main, id, { start: S, end: S + 9 }, stream(archive(10)));
    expect((await refusal(commitEntry(d, main, id, S + 11))).message).toContain("not the reserved cacheSize");
    expect(await lookupEntry(d, main, { keys: ["k"], version: V })).toBeUndefined();
    await commitEntry(d, main, id, S + 10);
    expect(await refusal(uploadChunk(d, main, id, { start: 0, end: 9 }, stream(archive(10))))).toMatchObject({ status: 400, reason: "committed" });
  });

  it("R2 failing on a put fails that chunk only; the chunk sent again (the client's retry) completes the save", async () => {
    const { d, blobs } = scene();
    const bytes = archive(S + 5);
    const id = await reserveEntry(d, main, { key: "k", version: V, cacheSize: bytes.length });
    blobs.fail = "putPart";
    await expect(uploadChunk(d, main, id, { start: 0, end: S - 1 }, stream(bytes.slice(0, S)))).rejects.toThrow("R2 failed");
    blobs.fail = undefined;
    await uploadChunk(d, main, id, { start: 0, end: S - 1 }, stream(bytes.slice(0, S)));
    await uploadChunk(d, main, id, { start: S, end: S + 4 }, stream(bytes.slice(S)));
    await commitEntry(d, main, id, bytes.length);
    expect(same((await restore(d, main, "k"))?.bytes, bytes)).toBe(true);
  });

  it("R2 failing on the commit's complete fails that commit, with nothing found; sent again, it commits; a third with another size is refused", async () => {
    const { d, blobs } = scene();
    const bytes = archive(10);
    const id = await reserveEntry(d, main, { key: "k", version: V, cacheSize: bytes.length });
    await uploadChunk(d, main, id, { start: 0, end: 9 }, stream(bytes));
    blobs.fail = "finish";
    await expect(commitEntry(d, main, id, bytes.length)).rejects.toThrow("R2 failed");
    expect(await lookupEntry(d, main, { keys: ["k"], version: V })).toBeUndefined();
    blobs.fail = undefined;
    expect(await commitEntry(d, main, id, bytes.length)).toBe(true);
    // The same commit again (its answer lost) is answered as done, but not as a second save; one of another size is refused.
    expect(await commitEntry(d, main, id, bytes.length)).toBe(false);
    expect(await refusal(commitEntry(d, main, id, bytes.length + 1))).toMatchObject({ status: 400, reason: "committed" });
    expect(same((await restore(d, main, "k"))?.bytes, bytes)).toBe(true);
  });
});

describe("upkeep", () => {
  it("a Worker killed mid-upload, or mid-commit (the object made, the entry not): the tick after leaves no entry and no object", async () => {
    const { d, blobs, clock } = scene();
    const a = await reserveEntry(d, main, { key: "a", version: V, cacheSize: 10 });
    await uploadChunk(d, main, a, { start: 0, end: 9 }, stream(archive(10)));
    const b = await reserveEntry(d, main, { key: "b", version: V, cacheSize: 10 });
    await uploadChunk(d, main, b, { start: 0, end: 9 }, stream(archive(10)));
    const entryB = (await d.index.get(main.repo, b))!.value;
    await blobs.finish(blobKey(main.repo, b), entryB.upload, await d.index.parts(main.repo, b));
    // Not yet stale: nothing goes.
    clock.t += STALE_RESERVATION_MS;
    expect((await maintainCache(d)).stale).toBe(0);
    clock.t += 1;
    expect((await maintainCache(d)).stale).toBe(2);
    expect(await d.index.all(main.repo)).toEqual([]);
    expect([...blobs.objects.keys()]).toEqual([]);
    expect(blobs.uploads.size).toBe(0);
  });

  it("a reservation whose upload never started (killed between reserve and start) frees its name after 5 minutes, not an hour", async () => {
    const { d, clock } = scene();
    const entry: CacheEntry = {
      id: 77,
      repo: main.repo,
      scope: main.scopes.write,
      key: "k",
      version: V,
      state: "reserved",
      upload: "",
      holder: "h",
      reservedAt: clock.t,
      usedAt: clock.t,
    };
    await d.index.reserve(entry);
    expect(await refusal(reserveEntry(d, main, { key: "k", version: V }))).toMatchObject({ status: 409 });
    clock.t += UNSTARTED_RESERVATION_MS;
    expect((await maintainCache(d)).stale).toBe(0);
    clock.t += 1;
    expect((await maintainCache(d)).stale).toBe(1);
    expect(await reserveEntry(d, main, { key: "k", version: V })).toBeGreaterThan(0);
  });

  it("over its quota, a repository loses its least recently used entries first; a restore counts as a use", async () => {
    const { d, clock } = scene({ maxEntryBytes: 100, repoBytes: 250 });
    for (const k of ["a", "b", "c"]) {
      await save(d, main, k, archive(100));
      clock.t += 2 * 3_600_000;
    }
    await restore(d, main, "a");
    const upkeep = await maintainCache(d);
    expect(upkeep.evicted).toEqual([{ repo: "org/app", bytes: 100 }]);
    expect((await d.index.all(main.repo)).map((e) => e.key).sort()).toEqual(["a", "c"]);
    const e = (key: string, usedAt: number, size: number) => ({ key, usedAt, size, state: "committed", id: usedAt }) as CacheEntry;
    expect(overQuota([e("x", 3, 10), e("y", 1, 10), e("z", 2, 10)], 20).map((x) => x.key)).toEqual(["y"]);
    expect(overQuota([e("x", 3, 10), e("y", 1, 10)], 20)).toEqual([]);
    // A save under way is neither counted nor evicted, however old: its upload is left to finish.
    expect(overQuota([{ ...e("r", 0, 10), state: "reserved" }, e("x", 3, 10), e("y", 1, 10)], 20)).toEqual([]);
  });

  it("an object whose entry is gone (expired) goes after its grace, a page at a time; one with its entry stays", async () => {
    const { d, blobs, clock } = scene();
    await save(d, main, "kept", archive(10));
    for (const id of [11, 12, 13]) blobs.objects.set(blobKey(main.repo, id), { bytes: archive(5), uploaded: clock.t });
    expect((await maintainCache(d)).orphans).toBe(0);
    clock.t += ORPHAN_GRACE_MS;
    expect((await maintainCache(d)).orphans).toBe(3);
    expect(blobs.objects.size).toBe(1);
    expect((await restore(d, main, "kept"))?.key).toBe("kept");
  });
});
