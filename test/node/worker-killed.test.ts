// A Worker killed mid-call (a deploy, an evicted isolate), with fair share at capacity 1 and
// another job waiting: a real `wrangler dev` process is SIGKILLed while the backend holds the PUT
// of a turn's runner, or of a new job's runner, then a second Worker takes over on the same URL
// (where the runners claim) with cron ticks every second. The slot the dead pass took is held by a
// job nobody asks a runner for; it is asked for again within ACK_WAIT_MS and a pass (stalled.ts,
// prepare.ts), and every job runs once, with no runner asked for twice that ran.
import { afterEach, describe, expect, inject, it } from "vitest";
import { freePort, startWorker } from "../../bench/lib.mjs";
import { provisionEnv, TEST_SECRETS, testEnv } from "../harness/env.ts";

type Worker = Awaited<ReturnType<typeof startWorker>>;
const ACK_WAIT_MS = 12_000;
const started: Worker[] = [];
afterEach(() => {
  for (const w of started.splice(0)) w.stop();
});

async function scene() {
  const port = await freePort();
  const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), {
    FAIR_SHARE: "on",
    CAPACITY_POD: 1,
    RECONCILE_BUDGET_MS: 2_000,
    ACK_WAIT_MS,
    RETRY_DELAY_MS: 1_000,
    PUBLIC_URL: `http://127.0.0.1:${port}`,
  });
  await provisionEnv(env);
  const control = async (what: string, body?: unknown) =>
    (await fetch(`${env.POD_BACKEND_URL}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {})).json() as Promise<{
      runners: unknown[];
      requests: { method: string; path: string }[];
      created: number;
      calls: number;
    }>;
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`http://127.0.0.1:${port}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}`, "content-type": "application/json" },
    });
  const publish = async (id: string, n: number, repository: string) => {
    const body = {
      version: 1,
      id,
      backend: "pod",
      workload: `spiffe://example.org/runner/pod/${id}`,
      labels: ["ubuntu-latest"],
      createdAt: "2026-12-05T10:00:00Z",
      job: { id: n, runId: n, attempt: 1, repository },
    };
    const res = await api("/v1/assignments", { method: "POST", body: JSON.stringify(body) });
    expect(res.status).toBe(202);
  };
  const stateOf = async (id: string) => {
    const res = await api(`/v1/assignments/${id}`);
    return res.status === 200 ? ((await res.json()) as { state: string }).state : `http ${res.status}`;
  };
  const until = async (what: string, ok: () => Promise<boolean>, ms: number) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (await ok()) return;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`timed out waiting for ${what}`);
  };
  const start = async () => {
    const w = await startWorker(env, port);
    started.push(w);
    return w;
  };
  /** SIGKILL: no `finally`, no flush, no reply. */
  const kill = (w: Worker) => {
    process.kill(-w.pid!, "SIGKILL");
    w.stop();
  };
  /** A second Worker on the same URL, ticking its cron every second until every job completed. */
  const takeOver = async (ids: string[], ms: number) => {
    const b = await start();
    let ticking = true;
    const ticks = (async () => {
      while (ticking) {
        await b.tick().catch(() => undefined);
        await new Promise((r) => setTimeout(r, 1_000));
      }
    })();
    try {
      await until(`${ids.join(", ")} completed`, async () => (await Promise.all(ids.map(stateOf))).every((s) => s === "completed"), ms);
    } finally {
      ticking = false;
      await ticks;
    }
    return b;
  };
  /** PUTs the backend took since its mode was last set (the first of them hangs). */
  const putInFlight = async () => (await control("state")).calls;
  return { env, control, publish, stateOf, until, start, kill, takeOver, putInFlight };
}

describe("a Worker killed during a backend call, with another job waiting", () => {
  it(
    "during a turn's call: a second Worker asks for the turn's runner again once its slot is older than ACK_WAIT_MS, and the waiting job runs after it",
    { timeout: 150_000 },
    async () => {
      const s = await scene();
      await s.control("mode", { token: TEST_SECRETS.BACKEND_TOKEN, autoClaimMs: 100, autoCompleteMs: 3_000 });
      const a = await s.start();
      await s.publish("k-1", 1, "a/one");
      await s.until("k-1 claimed", async () => (await s.stateOf("k-1")) === "claimed", 20_000);
      await s.publish("k-2", 2, "b/two");
      await s.publish("k-3", 3, "c/three");
      await s.until("both waiting", async () => (await s.stateOf("k-2")) === "capacity_wait" && (await s.stateOf("k-3")) === "capacity_wait", 10_000);
      // The next PUT (k-2's turn, given when k-1 completes) hangs in the backend.
      await s.control("mode", { token: TEST_SECRETS.BACKEND_TOKEN, autoClaimMs: 100, autoCompleteMs: 1_000, hangFirst: 1, hangMs: 120_000 });
      await s.until("the turn's PUT in flight", async () => (await s.putInFlight()) === 1, 20_000);
      expect(await s.stateOf("k-1")).toBe("completed");
      expect(await s.stateOf("k-2")).toBe("capacity_wait");
      s.kill(a);
      const killedAt = Date.now();
      await s.takeOver(["k-2", "k-3"], 90_000);
      // Within ACK_WAIT_MS and a few passes of the kill, not the hold (2 to 5 minutes) or the lease (hours).
      expect(Date.now() - killedAt).toBeLessThan(ACK_WAIT_MS + 40_000);
      // Made once each (the hung PUT made nothing), and torn down at completion.
      const state = await s.control("state");
      expect([state.created, state.runners]).toEqual([3, []]);
      expect(state.requests.filter((r) => r.method === "PUT").map((r) => r.path.split("/").at(-1))).toEqual(["k-1", "k-2", "k-2", "k-3"]);
    },
  );

  it(
    "during a new job's call: its message comes back after ACK_WAIT_MS holding the slot and asks with it; the waiting job runs after it",
    { timeout: 150_000 },
    async () => {
      const s = await scene();
      await s.control("mode", { token: TEST_SECRETS.BACKEND_TOKEN, autoClaimMs: 100, autoCompleteMs: 1_000, hangFirst: 1, hangMs: 120_000 });
      const a = await s.start();
      await s.publish("n-1", 1, "a/one");
      await s.until("the new job's PUT in flight", async () => (await s.putInFlight()) === 1, 20_000);
      await s.publish("n-2", 2, "b/two");
      await s.until("n-2 waiting", async () => (await s.stateOf("n-2")) === "capacity_wait", 10_000);
      expect(await s.stateOf("n-1")).toBe("received");
      s.kill(a);
      const killedAt = Date.now();
      await s.takeOver(["n-1", "n-2"], 90_000);
      expect(Date.now() - killedAt).toBeLessThan(ACK_WAIT_MS + 40_000);
      const state = await s.control("state");
      expect([state.created, state.runners]).toEqual([2, []]);
      expect(state.requests.filter((r) => r.method === "PUT").map((r) => r.path.split("/").at(-1))).toEqual(["n-1", "n-1", "n-2"]);
    },
  );
});
