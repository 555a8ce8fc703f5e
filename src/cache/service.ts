// The cache's operations for one job, over the index and the blobs: what the v1 routes (both
// forges') call once they know the job. A job is its repository and its scopes (scope.ts): every
// read and write stays within that repository, reads in its read scopes, writes in its write scope.
// Refusals carry their status and the `message` the client shows, and a reason for the metrics.
import { blobKey, type Blob, type Blobs } from "./blobs.ts";
import { newCacheId, type CacheEntry, type CacheIndex } from "./index-store.ts";
import { CacheInputError, checkKey, checkVersion, chooseEntry, type Lookup } from "./match.ts";
import { commitProblem, placeChunk, type Range } from "./parts.ts";
import type { Scopes } from "./scope.ts";

export interface CacheLimits {
  /** CACHE_MAX_ENTRY_BYTES: one entry's most. */
  maxEntryBytes: number;
  /** CACHE_REPO_BYTES: a repository's most; beyond it the least recently used go (maintain.ts). */
  repoBytes: number;
}

export interface CacheDeps {
  index: CacheIndex;
  blobs: Blobs;
  limits: CacheLimits;
  now: () => number;
}

/** Whose cache a request uses: its job's repository and scopes, and the assignment it runs (not a secret). */
export interface CacheJob {
  repo: string;
  scopes: Scopes;
  holder: string;
}

export type RefusalReason = "input" | "size" | "taken" | "not-reserved" | "scope" | "committed" | "chunk" | "commit" | "storage";

export class CacheRefusal extends Error {
  override readonly name = "CacheRefusal";
  readonly status: 400 | 403 | 404 | 409 | 503;
  readonly reason: RefusalReason;
  constructor(status: 400 | 403 | 404 | 409 | 503, reason: RefusalReason, message: string) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

/** A problem of the request's input as a 400 (its message names the field), for the routes and the metrics. */
export async function asked<T>(reason: RefusalReason, fn: () => T | Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof CacheInputError) throw new CacheRefusal(400, reason, err.message);
    throw err;
  }
}

/** A restore's entry is written again (its use noted) at most this often: a day's restores are one write. */
export const TOUCH_EVERY_MS = 60 * 60_000;

/** The entry a lookup restores, or undefined (a miss); its use is noted. */
export async function lookupEntry(d: CacheDeps, job: CacheJob, lookup: Lookup): Promise<CacheEntry | undefined> {
  const named = (await Promise.all(job.scopes.read.map((scope) => d.index.named(job.repo, scope, lookup.version)))).flat();
  const wanted = named.filter((n) => lookup.keys.some((k) => n.key.startsWith(k)));
  const read = await d.index.entries(
    job.repo,
    wanted.map((n) => n.id),
  );
  const committed = [...read.values()].filter((v) => v.value.state === "committed" && v.value.repo === job.repo);
  const chosen = chooseEntry(
    committed.map((v) => ({ ...v.value, committedAt: v.value.committedAt ?? 0, revision: v.revision })),
    lookup,
    job.scopes.read,
  );
  if (!chosen) return undefined;
  const { revision, ...entry } = chosen;
  const now = d.now();
  // Best effort: a lost write is another restore's note.
  if (now - entry.usedAt >= TOUCH_EVERY_MS) await d.index.update({ ...entry, usedAt: now }, revision).catch(() => false);
  return entry;
}

/** Reserves `key` in the job's write scope: its cacheId. One name, one entry: a second reserve is refused (409). */
export async function reserveEntry(d: CacheDeps, job: CacheJob, input: { key: unknown; version: unknown; cacheSize?: unknown }): Promise<number> {
  const key = await asked("input", () => checkKey(input.key));
  const version = await asked("input", () => checkVersion(input.version));
  const size = typeof input.cacheSize === "number" && Number.isSafeInteger(input.cacheSize) && input.cacheSize > 0 ? input.cacheSize : undefined;
  if (size !== undefined && size > d.limits.maxEntryBytes)
    throw new CacheRefusal(400, "size", `cacheSize ${size} is over this cache's entry limit (CACHE_MAX_ENTRY_BYTES = ${d.limits.maxEntryBytes})`);
  if (size !== undefined && size > d.limits.repoBytes)
    throw new CacheRefusal(400, "size", `cacheSize ${size} is over this repository's cache quota (CACHE_REPO_BYTES = ${d.limits.repoBytes})`);
  const now = d.now();
  for (let tries = 0; tries < 3; tries++) {
    const entry: CacheEntry = {
      id: newCacheId(),
      repo: job.repo,
      scope: job.scopes.write,
      key,
      version,
      state: "reserved",
      size,
      upload: "",
      holder: job.holder,
      reservedAt: now,
      usedAt: now,
    };
    const reserved = await d.index.reserve(entry);
    if (reserved === "id-taken") continue;
    if ("taken" in reserved)
      throw new CacheRefusal(
        409,
        "taken",
        reserved.taken.state === "committed" ? "an entry of this key is saved already (entries are immutable)" : "another job is saving this key",
      );
    // The entry is written before its upload starts: an upload never outlives what names it (maintain.ts ends stale ones).
    const upload = await d.blobs.start(blobKey(job.repo, entry.id));
    const current = await d.index.get(job.repo, entry.id);
    if (!current || !(await d.index.update({ ...current.value, upload }, current.revision))) {
      await d.blobs.abort(blobKey(job.repo, entry.id), upload).catch(() => undefined);
      throw new CacheRefusal(503, "storage", "the reservation changed while its upload started; try again");
    }
    return entry.id;
  }
  throw new CacheRefusal(503, "storage", "no free cacheId; try again");
}

/** The job's own reserved entry: in its repository (else 404, as Forgejo answers) and its write scope (else 403). */
async function ownReserved(d: CacheDeps, job: CacheJob, id: number) {
  const read = Number.isSafeInteger(id) && id > 0 ? await d.index.get(job.repo, id) : undefined;
  if (!read || read.value.repo !== job.repo) throw new CacheRefusal(404, "not-reserved", `cache ${id} is not reserved`);
  if (read.value.scope !== job.scopes.write) throw new CacheRefusal(403, "scope", "cache write denied: the entry is not in this job's scope");
  if (read.value.state !== "reserved") throw new CacheRefusal(400, "committed", `cache ${id} is committed already`);
  return read;
}

/** One chunk of an upload, streamed to its part; `body` is consumed only once the chunk is placed. */
export async function uploadChunk(d: CacheDeps, job: CacheJob, id: number, range: Range, body: ReadableStream<Uint8Array>): Promise<void> {
  for (let tries = 0; tries < 5; tries++) {
    const { value: entry, revision } = await ownReserved(d, job, id);
    if (!entry.upload) throw new CacheRefusal(503, "storage", `cache ${id}'s upload is not started yet; try again`);
    const placed = await asked("chunk", () => placeChunk({ size: entry.size, partSize: entry.partSize }, range));
    if ("wait" in placed) throw new CacheRefusal(503, "chunk", placed.wait);
    // The first full chunk fixes the part size for every other: by compare-and-set, so that two first chunks agree.
    if (entry.partSize === undefined && !(await d.index.update({ ...entry, partSize: placed.partSize }, revision))) continue;
    const length = range.end - range.start + 1;
    const etag = await d.blobs.putPart(blobKey(job.repo, id), entry.upload, placed.part, body, length);
    await d.index.putPart(job.repo, id, { part: placed.part, size: length, etag });
    return;
  }
  throw new CacheRefusal(503, "storage", "the reservation kept changing; try again");
}

/**
 * Commits an upload whose parts cover `size` bytes once each; then, and only then, is it found.
 * True when this call committed it; false when it was committed already (a commit sent again).
 */
export async function commitEntry(d: CacheDeps, job: CacheJob, id: number, size: unknown): Promise<boolean> {
  const own = await ownReserved(d, job, id).catch(async (err: unknown) => {
    // A commit sent again after its answer was lost: the same size committed is its answer.
    if (err instanceof CacheRefusal && err.reason === "committed" && (await d.index.get(job.repo, id))?.value.size === size) return undefined;
    throw err;
  });
  if (!own) return false;
  const entry = own.value;
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) throw new CacheRefusal(400, "commit", "size must be the archive's size in bytes");
  const parts = await d.index.parts(job.repo, id);
  const problem = commitProblem(parts, entry.partSize, size, entry.size);
  if (problem) throw new CacheRefusal(400, "commit", `the upload does not hold: ${problem}`);
  await d.blobs.finish(blobKey(job.repo, id), entry.upload, parts).catch(async (err: unknown) => {
    // A commit cut short after R2 completed the upload (its upload is gone, its object made): this one goes on.
    if ((await d.blobs.size(blobKey(job.repo, id))) !== size) throw err;
  });
  const now = d.now();
  for (let tries = 0; tries < 5; tries++) {
    const current = await d.index.get(job.repo, id);
    if (!current) throw new CacheRefusal(404, "not-reserved", `cache ${id} is not reserved`);
    if (current.value.state === "committed") return false;
    if (await d.index.update({ ...current.value, state: "committed", size, committedAt: now, usedAt: now }, current.revision)) return true;
  }
  throw new CacheRefusal(503, "storage", "the commit could not be written; try again");
}

/** A committed entry's bytes, whole or from `offset`; undefined when the entry or its object is gone. */
export async function readEntry(d: CacheDeps, repo: string, id: number, range?: { offset: number; length?: number }): Promise<Blob | undefined> {
  const read = await d.index.get(repo, id);
  if (!read || read.value.state !== "committed" || read.value.repo !== repo) return undefined;
  return d.blobs.read(blobKey(repo, id), range);
}
