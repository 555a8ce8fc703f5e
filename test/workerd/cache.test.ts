// The Actions cache inside workerd, on real NATS and the local R2 of the Workers integration: a
// job's capability (made from its record as the Worker makes it) saves in chunks, finds by a
// restore key, and downloads by the signed URL; /healthz says the cache is on; another
// repository's job finds nothing; the cron tick's upkeep runs. And a Forgejo runner's proxy, played
// by the test with the contract's headers and MAC, signing with the secret its runner was given.
import { inject, describe, expect, it } from "vitest";
import { cacheKey, capability } from "../../src/cache/capability.ts";
import { forgejoMac, HEADERS } from "../../src/cache/forgejo-mac.ts";
import { assignment, forgejoTestEnv, provisionEnv, TEST_SECRETS, testEnv } from "../harness/env.ts";
import { forgejoControl, poll } from "../harness/forgejo.ts";
import { backendControl, bearer, claimTokenOf, request, sleep, tick } from "../harness/worker.ts";

const V = "a".repeat(64);
const MiB = 1024 * 1024;

/** An assignment of `repository`, published; its capability as its runner is given it. */
async function jobWithCapability(env: Record<string, string>, id: string, repository: string) {
  const body = { ...assignment(id), job: { id: 1, runId: 1, attempt: 1, repository } };
  const published = await request(env, "/v1/assignments", { method: "POST", headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true), body: JSON.stringify(body) });
  expect(published.status).toBe(202);
  let receivedAt: string | undefined;
  for (let i = 0; i < 50 && !receivedAt; i++) {
    const view = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
    if (view.status === 200) receivedAt = ((await view.json()) as { receivedAt?: string }).receivedAt;
    if (!receivedAt) await tick(env);
  }
  // Its runner claims it (a Gitea holder is served once claimed: the claim names the job it runs).
  const claimed = await request(env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(await claimTokenOf(env, id)) });
  expect(claimed.status).toBe(200);
  const key = await cacheKey(TEST_SECRETS.CLAIM_SIGNING_KEY);
  const cap = await capability(key, { assignment: id, incarnation: Date.parse(receivedAt!).toString(36) });
  return `/cache/${cap}/_apis/artifactcache`;
}

describe("the Actions cache in workerd", () => {
  it("a job saves in chunks and restores by a restore key through the signed URL; another repository's job misses; /healthz says on", async () => {
    const env = { ...testEnv(inject("natsWsUrl"), inject("backendUrl")), TEST_CACHE_BUCKET: "on", METRICS_TOKEN: "metrics-token-0000000" };
    await provisionEnv(env);
    expect(((await (await request(env, "/healthz")).json()) as { cache: unknown }).cache).toEqual({ on: true });
    const mine = await jobWithCapability(env, "cache-job-1", "org/app");
    const size = 6 * MiB + 123;
    const bytes = new Uint8Array(size).map((_, i) => (i * 7) & 0xff);
    const reserve = await request(env, `${mine}/caches`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: "npm-linux-abc", version: V, cacheSize: size }),
    });
    expect(reserve.status).toBe(200);
    const { cacheId } = (await reserve.json()) as { cacheId: number };
    // The last chunk first waits for the part size (503); then the first, then the last again.
    const chunk = (start: number, end: number) =>
      request(env, `${mine}/caches/${cacheId}`, {
        method: "PATCH",
        headers: { "content-type": "application/octet-stream", "content-range": `bytes ${start}-${end}/*` },
        body: bytes.slice(start, end + 1),
      });
    expect((await chunk(5 * MiB, size - 1)).status).toBe(503);
    expect((await chunk(0, 5 * MiB - 1)).status).toBe(200);
    expect((await chunk(5 * MiB, size - 1)).status).toBe(200);
    const commit = await request(env, `${mine}/caches/${cacheId}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ size }),
    });
    expect(commit.status).toBe(200);
    const hit = await request(env, `${mine}/cache?keys=${encodeURIComponent("npm-linux-xyz,npm-linux-")}&version=${V}`);
    expect(hit.status).toBe(200);
    const { archiveLocation, cacheKey: matched } = (await hit.json()) as { archiveLocation: string; cacheKey: string };
    expect(matched).toBe("npm-linux-abc");
    const download = await request(env, archiveLocation.replace("https://dispatch.example.org", ""));
    expect(download.headers.get("content-length")).toBe(String(size));
    const got = new Uint8Array(await download.arrayBuffer());
    expect(got.length === size && got.every((b, i) => b === bytes[i])).toBe(true);
    const theirs = await jobWithCapability(env, "cache-job-2", "org/other");
    expect((await request(env, `${theirs}/cache?keys=npm-linux-&version=${V}`)).status).toBe(204);
    await tick(env);
    expect((await request(env, `${mine}/cache?keys=npm-linux-abc&version=${V}`)).status).toBe(200);
    // Counted per repository after each answer; the tick's upkeep counted what is stored.
    const metrics = await (await request(env, "/metrics", { headers: bearer("metrics-token-0000000") })).text();
    for (const line of [
      'gdr_cache_hits_total{repository="org/app"} 2',
      'gdr_cache_misses_total{repository="org/other"} 1',
      `gdr_cache_bytes_in_total{repository="org/app"} ${size}`,
      `gdr_cache_bytes_out_total{repository="org/app"} ${size}`,
      'gdr_cache_entries{repository="org/app"} 1',
      `gdr_cache_bytes_stored{repository="org/app"} ${size}`,
      'gdr_cache_refusals_total{repository="org/app",reason="chunk"} 1',
    ])
      expect(metrics).toContain(line);
  });
});

describe("the Actions cache of a Forgejo runner in workerd", () => {
  it("its runner is given the origin and a secret of its own; the proxy's signed requests save and restore; another secret or repository is refused", async () => {
    const env = forgejoTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("forgejoUrl"), { RETRY_DELAY_MS: 50, TEST_CACHE_BUCKET: "on" });
    await provisionEnv(env);
    const forgejo = forgejoControl(env);
    const backend = backendControl(env);
    const jobs = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }, { runs_on: ["ubuntu-latest"] }]);
    await poll(env);
    // Each runner's launch as the http backend gets it: its cache's URL and secret.
    let given: { url: string; secret: string; repository: string }[] = [];
    for (let i = 0; i < 100 && given.length < 2; i++) {
      await sleep(50);
      const puts = (await backend.state()).requests.filter((r) => r.method === "PUT").map((r) => JSON.parse(r.body));
      given = [...new Map(puts.map((b) => [b.assignment.id, { ...b.cache, repository: b.assignment.job.repository }])).values()];
    }
    expect(given).toHaveLength(2);
    const [mine, theirs] = given as [(typeof given)[0], (typeof given)[0]];
    expect(mine.url).toMatch(/^https:\/\/dispatch\.example\.org\/\?gdr=forgejo-/);
    expect(mine.secret).toMatch(/^[0-9a-f]{64}$|^[A-Za-z0-9_-]{43}$/);
    expect(theirs.secret).not.toBe(mine.secret);
    // The proxy drops the path and keeps the query: each request is the origin's /_apis/artifactcache/… with the query.
    const query = new URL(mine.url).search.slice(1);
    const at = (path: string) => `/_apis/artifactcache${path}${path.includes("?") ? "&" : "?"}${query}`;
    const signed = async (secret: string, repo = mine.repository) => {
      const ts = String(Math.floor(Date.now() / 1000));
      return {
        [HEADERS.repo]: repo,
        [HEADERS.run]: "7",
        [HEADERS.timestamp]: ts,
        [HEADERS.mac]: await forgejoMac(secret, repo, "7", ts, ""),
        "Forgejo-Cache-Host": "http://10.0.0.5:4000",
        "Forgejo-Cache-RunId": "r7",
      };
    };
    const h = await signed(mine.secret);
    const reserved = await request(env, at("/caches"), {
      method: "POST",
      headers: { ...h, "content-type": "application/json" },
      body: JSON.stringify({ key: "go-mod-1", version: V, cacheSize: 5 }),
    });
    expect(reserved.status).toBe(200);
    const { cacheId } = (await reserved.json()) as { cacheId: number };
    expect((await request(env, at(`/caches/${cacheId}`), { method: "PATCH", headers: { ...h, "content-range": "bytes 0-4/*" }, body: "hello" })).status).toBe(
      200,
    );
    expect((await request(env, at(`/caches/${cacheId}`), { method: "POST", headers: h, body: JSON.stringify({ size: 5 }) })).status).toBe(200);
    const hit = await request(env, at(`/cache?keys=go-mod-&version=${V}`), { headers: h });
    expect(hit.status).toBe(200);
    expect(((await hit.json()) as { archiveLocation: string }).archiveLocation).toBe(`http://10.0.0.5:4000/r7/_apis/artifactcache/artifacts/${cacheId}`);
    const got = await request(env, at(`/artifacts/${cacheId}`), { headers: h });
    expect([got.status, await got.text()]).toEqual([200, "hello"]);
    // Near misses: the other job's secret on this job's query, and this job's secret naming another repository.
    expect((await request(env, at(`/cache?keys=go-mod-&version=${V}`), { headers: await signed(theirs.secret) })).status).toBe(403);
    expect((await request(env, at(`/cache?keys=go-mod-&version=${V}`), { headers: await signed(mine.secret, "org/elsewhere") })).status).toBe(403);
    expect(jobs).toHaveLength(2);
  });
});
