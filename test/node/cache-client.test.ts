// The real client, @actions/cache 6.3.0's saveCache and restoreCache, against the Worker served by
// `wrangler dev` (workerd, local R2, the test's nats-server), with the environment a Gitea runner's
// job has: ACTIONS_CACHE_URL the runner's cache.external_server (its capability URL), a runtime
// token the Worker does not need, and a GITHUB_SERVER_URL that is not GitHub's (so v1 is used).
// A save of an archive of over 100 MiB (several 32 MiB chunks, 4 at once) and its restore; a
// restore key choosing the newest; a miss; two saves of one key at once; another repository's job.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import * as cache from "@actions/cache";
import { cacheKey, capability } from "../../src/cache/capability.ts";
import { assignment, currentClaimToken, provisionEnv, TEST_SECRETS, testEnv } from "../harness/env.ts";
import { startWorker } from "../../bench/lib.mjs";
import { closeNats, openNats, type NatsHandle } from "../../src/nats/connection.ts";
import { recordKey, recordsBucket } from "../../src/nats/names.ts";
import { bindBucket, casWrite, readJson } from "../../src/state/kv.ts";
import type { AssignmentRecord } from "../../src/state/record.ts";

let worker: Awaited<ReturnType<typeof startWorker>>;
let vars: Record<string, string>;
let nats: NatsHandle;
let bucket: string;
const work = mkdtempSync(join(tmpdir(), "gdr-cache-client-"));

beforeAll(async () => {
  const base = testEnv(inject("natsWsUrl"), inject("backendUrl"));
  const config = await provisionEnv(base);
  nats = await openNats(config);
  bucket = recordsBucket(config);
  // Its PUBLIC_URL is where it answers (startWorker's default): the archive's download comes back to it.
  const { PUBLIC_URL: _elsewhere, ...rest } = base;
  worker = await startWorker(rest);
  vars = { ...base, PUBLIC_URL: worker.url };
}, 120_000);
afterAll(async () => {
  worker?.stop();
  if (nats) await closeNats(nats.nc);
  rmSync(work, { recursive: true, force: true });
});

const api = (path: string, init: RequestInit = {}) => fetch(`${worker.url}${path}`, init);
const bearer = (t: string) => ({ authorization: `Bearer ${t}`, "content-type": "application/json" });

/** A job of `repository`, claimed by its runner; the cache URL its runner was given. */
async function jobCacheUrl(id: string, repository: string): Promise<string> {
  const body = { ...assignment(id), job: { id: 1, runId: 1, attempt: 1, repository } };
  expect((await api("/v1/assignments", { method: "POST", headers: bearer(TEST_SECRETS.DISPATCH_TOKEN), body: JSON.stringify(body) })).status).toBe(202);
  const get = (path: string) => api(path, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  let receivedAt: string | undefined;
  for (let i = 0; i < 100 && !receivedAt; i++) {
    const view = await get(`/v1/assignments/${id}`);
    if (view.status === 200) receivedAt = ((await view.json()) as { receivedAt?: string }).receivedAt;
    else await new Promise((r) => setTimeout(r, 100));
  }
  const token = await currentClaimToken(get, id);
  expect((await api(`/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(token) })).status).toBe(200);
  const cap = await capability(await cacheKey(TEST_SECRETS.CLAIM_SIGNING_KEY), { assignment: id, incarnation: Date.parse(receivedAt!).toString(36) });
  return `${vars.PUBLIC_URL}/cache/${cap}/`;
}

/** Changes a job's record in the records bucket: what the webhook or the job's end would have written. */
async function changeRecord(id: string, change: (r: AssignmentRecord) => AssignmentRecord) {
  const kv = await bindBucket(nats, bucket);
  const read = (await readJson<AssignmentRecord>(kv, recordKey(id)))!;
  expect(await casWrite(kv, recordKey(id), change(read.value), read.revision)).not.toBeNull();
}

/** What @actions/core warns during `fn` (its ::warning:: lines on stdout): where the client says why a save or restore failed. */
async function warnings<T>(fn: () => Promise<T>): Promise<{ value: T; said: string }> {
  const said: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    said.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    return { value: await fn(), said: said.join("") };
  } finally {
    process.stdout.write = write;
  }
}

/** Runs `fn` as a step of a job whose runner was given `url`: the variables act_runner sets. */
async function asJob<T>(url: string, fn: () => Promise<T>): Promise<T> {
  const saved = { ...process.env };
  Object.assign(process.env, {
    ACTIONS_CACHE_URL: url,
    ACTIONS_RUNTIME_TOKEN: "gitea-runtime-token",
    GITHUB_SERVER_URL: "https://gitea.example.org",
    RUNNER_TEMP: work,
  });
  try {
    return await fn();
  } finally {
    process.env = saved;
  }
}

const digest = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

describe("@actions/cache 6.3.0 against the Worker", () => {
  it("saves an archive of over 100 MiB in chunks and restores it byte for byte; a restore key picks the newest; a miss is a miss", async () => {
    const url = await jobCacheUrl("client-1", "org/app");
    const dir = join(work, "deps");
    mkdirSync(dir, { recursive: true });
    // Incompressible, so that the archive is as large as the file.
    const file = join(dir, "blob.bin");
    writeFileSync(file, randomBytes(104 * 1024 * 1024));
    const want = digest(file);
    const id = await asJob(url, () => cache.saveCache([dir], "deps-linux-v1"));
    expect(id).toBeGreaterThan(0);
    writeFileSync(join(dir, "small.txt"), "newer");
    rmSync(file);
    expect(await asJob(url, () => cache.saveCache([dir], "deps-linux-v2"))).toBeGreaterThan(0);
    rmSync(dir, { recursive: true, force: true });
    expect(await asJob(url, () => cache.restoreCache([dir], "deps-linux-v1"))).toBe("deps-linux-v1");
    expect(digest(file)).toBe(want);
    rmSync(dir, { recursive: true, force: true });
    expect(await asJob(url, () => cache.restoreCache([dir], "deps-mac-v1", ["deps-linux-"]))).toBe("deps-linux-v2");
    expect(readFileSync(join(dir, "small.txt"), "utf8")).toBe("newer");
    expect(await asJob(url, () => cache.restoreCache([dir], "pip-linux", ["pip-"]))).toBeUndefined();
  }, 180_000);

  it("two saves of one key at once: one saves, the other is told another job is saving it; another repository's job finds neither", async () => {
    const url = await jobCacheUrl("client-2", "org/app2");
    const dir = join(work, "twice");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "f.txt"), "x".repeat(1000));
    const ids = await asJob(url, () => Promise.all([cache.saveCache([dir], "same-key"), cache.saveCache([dir], "same-key")]));
    expect(ids.filter((i) => i > 0)).toHaveLength(1);
    const other = await jobCacheUrl("client-3", "org/other");
    expect(await asJob(other, () => cache.restoreCache([dir], "same-key"))).toBeUndefined();
    expect(await asJob(url, () => cache.restoreCache([dir], "same-key"))).toBe("same-key");
  }, 60_000);

  it("an ended job's capability saves and restores nothing past its grace, and still does within it", async () => {
    const url = await jobCacheUrl("client-4", "org/ended");
    const dir = join(work, "ended");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "f.txt"), "before the end");
    expect(await asJob(url, () => cache.saveCache([dir], "built"))).toBeGreaterThan(0);
    // Its job ended 9 minutes ago: a post-job save and restore are still served.
    const endedAgo = (min: number) => (r: AssignmentRecord) =>
      ({ ...r, state: "completed", completedAt: new Date(Date.now() - min * 60_000).toISOString() }) as AssignmentRecord;
    await changeRecord("client-4", endedAgo(9));
    expect(await asJob(url, () => cache.restoreCache([dir], "built"))).toBe("built");
    expect(await asJob(url, () => cache.saveCache([dir], "post-job"))).toBeGreaterThan(0);
    // 11 minutes ago: past the grace, every route refuses it, and the client says why.
    await changeRecord("client-4", endedAgo(11));
    const restore = await warnings(() => asJob(url, () => cache.restoreCache([dir], "built")));
    expect(restore.value).toBeUndefined();
    expect(restore.said).toContain("Failed to restore: cache read denied: this runner's job has ended");
    const save = await warnings(() => asJob(url, () => cache.saveCache([dir], "too-late")));
    expect(save.value).toBe(-1);
    expect(save.said).toContain("this runner's job has ended");
    // The entries it saved in time are another job's to restore.
    const next = await jobCacheUrl("client-5", "org/ended");
    expect(await asJob(next, () => cache.restoreCache([dir], "post-job"))).toBe("post-job");
  }, 60_000);

  it("a pull request's job saves in its own run's scope: a default-branch job never restores it, and it restores the default branch's", async () => {
    // The records as Gitea's webhooks leave them: a push to main (head_branch "main"), and a
    // pull request's run (head_branch "", the branch unknown), both of a repository whose default is main.
    const mainUrl = await jobCacheUrl("client-6", "org/prs");
    await changeRecord("client-6", (r) => ({ ...r, job: { ...r.job!, run: 60, branch: "main", defaultBranch: "main" } }));
    const prUrl = await jobCacheUrl("client-7", "org/prs");
    await changeRecord("client-7", (r) => ({ ...r, job: { ...r.job!, run: 70, branch: "", defaultBranch: "main" } }));
    const dir = join(work, "prs");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "f.txt"), "from the pull request");
    expect(await asJob(prUrl, () => cache.saveCache([dir], "deps"))).toBeGreaterThan(0);
    // The default branch's job misses it, by its key and by a prefix, and saves its own under the same key.
    expect(await asJob(mainUrl, () => cache.restoreCache([dir], "deps", ["de"]))).toBeUndefined();
    writeFileSync(join(dir, "f.txt"), "from main");
    expect(await asJob(mainUrl, () => cache.saveCache([dir], "deps"))).toBeGreaterThan(0);
    writeFileSync(join(dir, "f.txt"), "");
    expect(await asJob(mainUrl, () => cache.restoreCache([dir], "deps"))).toBe("deps");
    expect(readFileSync(join(dir, "f.txt"), "utf8")).toBe("from main");
    // The pull request's job reads its own run's scope first, then the default branch's.
    expect(await asJob(prUrl, () => cache.restoreCache([dir], "deps"))).toBe("deps");
    expect(readFileSync(join(dir, "f.txt"), "utf8")).toBe("from the pull request");
    expect(await asJob(prUrl, () => cache.restoreCache([dir], "other", ["dep"]))).toBe("deps");
    writeFileSync(join(dir, "g.txt"), "only main's");
    const onlyMain = join(work, "only-main");
    mkdirSync(onlyMain, { recursive: true });
    writeFileSync(join(onlyMain, "m.txt"), "main");
    expect(await asJob(mainUrl, () => cache.saveCache([onlyMain], "main-only"))).toBeGreaterThan(0);
    rmSync(onlyMain, { recursive: true });
    expect(await asJob(prUrl, () => cache.restoreCache([onlyMain], "main-only"))).toBe("main-only");
    expect(readFileSync(join(onlyMain, "m.txt"), "utf8")).toBe("main");
  }, 60_000);
});
