// A save with the Worker killed at each of its awaits (a deploy, an evicted isolate): before a call
// to the records bucket (real NATS KV) or to R2 (the in-memory stand-in) is made, or after it with
// its answer lost. No guarantee may rest on the next line running. Two passes after each cut:
// - the job died with the Worker: no lookup ever finds a torn entry, and once the tick after has
//   run there is no entry, no object and no upload of its save left (only a committed entry whole);
// - the client tried again (it retries a 5xx): the save completes and restores byte for byte, or
//   its reserve is refused (409, another job is saving the key) and the key is free after the tick.
import type { KV } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { blobKey, type Blobs } from "../../src/cache/blobs.ts";
import { kvCacheIndex } from "../../src/cache/kv-index.ts";
import type { CacheIndex } from "../../src/cache/index-store.ts";
import { maintainCache, ORPHAN_GRACE_MS, STALE_RESERVATION_MS } from "../../src/cache/maintain.ts";
import { MiB } from "../../src/cache/parts.ts";
import { CacheRefusal, commitEntry, lookupEntry, readEntry, reserveEntry, uploadChunk, type CacheDeps, type CacheJob } from "../../src/cache/service.ts";
import { closeNats, openNats, type NatsHandle } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { bindBucket } from "../../src/state/kv.ts";
import { memoryBlobs } from "../harness/cache-memory.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";
import { aroundKv } from "../harness/hetzner.ts";

const V = "e".repeat(64);
const S = 5 * MiB;
const BYTES = new Uint8Array(S + 1000).map((_, i) => (i * 13 + 7) & 0xff);
const KV_CALLS = new Set(["get", "put", "create", "update", "delete", "purge", "keys"]);
const BLOB_CALLS = ["start", "putPart", "finish", "abort", "read", "size", "remove", "list"] as const;
class Killed extends Error {}
type Mode = "before" | "after";

let handle: NatsHandle;
let kv: KV;
let bucket: string;
beforeAll(async () => {
  const config = await provisionEnv(testEnv(inject("natsWsUrl"), "http://127.0.0.1:9"));
  handle = await openNats(config);
  bucket = recordsBucket(config);
  kv = await bindBucket(handle, bucket);
});
afterAll(() => closeNats(handle.nc));

/** A cache whose KV and R2 calls are numbered; the `at`-th is cut, before it is made or after. */
function killable() {
  // `dead`: once cut, the invocation makes no call more (a retry is a new invocation, so it may).
  const cut = { n: 0, at: Infinity, mode: "before" as Mode, fired: false, dead: true };
  const step = async <T>(call: () => Promise<T>): Promise<T> => {
    const n = ++cut.n;
    if (cut.fired && cut.dead) throw new Killed(`call ${n} after the kill`);
    if (n === cut.at && cut.mode === "before") throw ((cut.fired = true), new Killed(`killed before call ${n}`));
    const v = await call();
    if (n === cut.at && cut.mode === "after") throw ((cut.fired = true), new Killed(`killed after call ${n}`));
    return v;
  };
  const clock = { t: Date.now() };
  const blobs = memoryBlobs(() => clock.t);
  const wrapped = { ...blobs } as Blobs;
  for (const m of BLOB_CALLS)
    (wrapped as unknown as Record<string, unknown>)[m] = (...a: never[]) => step(() => (blobs[m] as (...x: never[]) => Promise<unknown>)(...a));
  const index: CacheIndex = kvCacheIndex(handle, aroundKv(kv, KV_CALLS, step), bucket);
  const d: CacheDeps = { index, blobs: wrapped, limits: { maxEntryBytes: 100 * MiB, repoBytes: 200 * MiB }, now: () => clock.t };
  /** Runs `fn` with call `at` cut; whether the cut fired. */
  const run = async <T>(at: number, mode: Mode, fn: () => Promise<T>, dead = true): Promise<{ value?: T; killed: boolean; calls: number }> => {
    Object.assign(cut, { n: 0, at, mode, fired: false, dead });
    try {
      const value = await fn();
      return { value, killed: cut.fired, calls: cut.n };
    } catch (err) {
      if (!cut.fired) throw err;
      return { killed: true, calls: cut.n };
    } finally {
      Object.assign(cut, { at: Infinity, fired: false });
    }
  };
  return { d, blobs, clock, run };
}

let repos = 0;
const jobOf = (): CacheJob => ({ repo: `org/killed-${process.pid}-${++repos}`, scopes: { read: ["branch:main"], write: "branch:main" }, holder: "gitea-1-1" });
const part = (start: number, end: number) => new Response(BYTES.slice(start, end + 1)).body!;

/** The client's save: reserve, the last chunk then the first (out of order), commit. */
async function save(d: CacheDeps, job: CacheJob, key: string): Promise<number> {
  const id = await reserveEntry(d, job, { key, version: V, cacheSize: BYTES.length });
  await uploadChunk(d, job, id, { start: 0, end: S - 1 }, part(0, S - 1));
  await uploadChunk(d, job, id, { start: S, end: BYTES.length - 1 }, part(S, BYTES.length - 1));
  await commitEntry(d, job, id, BYTES.length);
  return id;
}

/** The client's save with each request tried again on a 5xx or a dropped answer, as @actions/cache does (3 tries). */
async function saveRetrying(d: CacheDeps, job: CacheJob, key: string): Promise<number | CacheRefusal> {
  const again = async <T>(fn: () => Promise<T>): Promise<T> => {
    for (let i = 1; ; i++) {
      try {
        return await fn();
      } catch (err) {
        const retryable = !(err instanceof CacheRefusal) || err.status === 503;
        if (!retryable || i === 3) throw err;
      }
    }
  };
  try {
    const id = await again(() => reserveEntry(d, job, { key, version: V, cacheSize: BYTES.length }));
    await again(() => uploadChunk(d, job, id, { start: 0, end: S - 1 }, part(0, S - 1)));
    await again(() => uploadChunk(d, job, id, { start: S, end: BYTES.length - 1 }, part(S, BYTES.length - 1)));
    await again(() => commitEntry(d, job, id, BYTES.length));
    return id;
  } catch (err) {
    if (err instanceof CacheRefusal) return err;
    throw err;
  }
}

async function restored(d: CacheDeps, job: CacheJob, key: string): Promise<Uint8Array | undefined> {
  const entry = await lookupEntry(d, job, { keys: [key], version: V });
  const blob = entry && (await readEntry(d, job.repo, entry.id));
  return blob && new Uint8Array(await new Response(blob.body).arrayBuffer());
}
const whole = (got: Uint8Array | undefined) => !!got && Buffer.from(got).equals(Buffer.from(BYTES));

/** What a repository holds once the tick after has run: entries (and whether each is whole), objects, uploads. */
async function leftAfterTick(k: ReturnType<typeof killable>, job: CacheJob) {
  k.clock.t += STALE_RESERVATION_MS + ORPHAN_GRACE_MS + 1;
  await maintainCache(k.d);
  const entries = await k.d.index.all(job.repo);
  const objects = [...k.blobs.objects.keys()].filter((key) => key.startsWith(`cache/${job.repo}/`));
  const uploads = [...k.blobs.uploads.values()].filter((u) => u.key.startsWith(`cache/${job.repo}/`) && u.parts.size > 0);
  return { entries, objects, uploads };
}

// The calls a whole save makes, counted on an uncut run.
let calls = 0;
it("a save uncut: its calls are counted, and it restores", async () => {
  const k = killable();
  const job = jobOf();
  const { calls: n, killed } = await k.run(Infinity, "before", () => save(k.d, job, "deps"));
  expect(killed).toBe(false);
  expect(whole(await restored(k.d, job, "deps"))).toBe(true);
  calls = n;
  expect(calls).toBeGreaterThanOrEqual(10);
});

describe.each(["before", "after"] as const)("killed %s a call", (mode) => {
  it("at each call: nothing torn is found; after the tick, no entry, object or upload is left but a whole committed one", async () => {
    for (let at = 1; at <= calls; at++) {
      const k = killable();
      const job = jobOf();
      const { killed } = await k.run(at, mode, () => save(k.d, job, "deps"));
      expect(killed, `call ${at}`).toBe(true);
      const found = await restored(k.d, job, "deps");
      expect(found === undefined || whole(found), `call ${at}: a torn entry`).toBe(true);
      const { entries, objects, uploads } = await leftAfterTick(k, job);
      expect(
        entries.every((e) => e.state === "committed"),
        `call ${at}: a reservation outlived the tick`,
      ).toBe(true);
      expect(objects, `call ${at}: objects`).toEqual(entries.map((e) => blobKey(job.repo, e.id)));
      expect(uploads, `call ${at}: uploads with parts`).toEqual([]);
      if (entries.length) expect(whole(await restored(k.d, job, "deps")), `call ${at}`).toBe(true);
    }
  }, 120_000);

  it("at each call, the pass after: the client's retries complete the save, or its reserve is refused and the key is free after the tick", async () => {
    for (let at = 1; at <= calls; at++) {
      const k = killable();
      const job = jobOf();
      // The kill cuts one invocation; the client's next try is another.
      const outcome = await k.run(at, mode, () => saveRetrying(k.d, job, "deps"), false);
      expect(outcome.killed, `call ${at}`).toBe(true);
      if (typeof outcome.value === "number") {
        expect(whole(await restored(k.d, job, "deps")), `call ${at}: saved but not whole`).toBe(true);
      } else {
        expect(outcome.value, `call ${at}`).toBeInstanceOf(CacheRefusal);
        expect((outcome.value as CacheRefusal).status, `call ${at}: ${(outcome.value as CacheRefusal).message}`).toBe(409);
        expect(await restored(k.d, job, "deps"), `call ${at}`).toBeUndefined();
        await leftAfterTick(k, job);
        expect(await save(k.d, job, "deps"), `call ${at}: the key after the tick`).toBeGreaterThan(0);
        expect(whole(await restored(k.d, job, "deps"))).toBe(true);
      }
    }
  }, 120_000);
});
