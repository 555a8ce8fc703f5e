// The layout on a real 3-node cluster: R1 → R3 in place with messages and records kept, and
// /healthz naming replica counts that differ from JETSTREAM_REPLICAS and replicas that are offline.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/config.ts";
import { provision } from "../../src/layout.ts";
import { withNats } from "../../src/nats/connection.ts";
import { provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";
import { streamState } from "../harness/nats.ts";
import { bearer, request, sleep } from "../harness/worker.ts";

const clusterUrl = inject("clusterNatsUrl");
const control = inject("clusterControlUrl");
const backendUrl = inject("backendUrl");
type Health = { ok: boolean; problems: string[]; stream?: { replicas: number; messages: number } };
const health = async (env: Record<string, string>) => (await (await request(env, "/healthz", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as Health;
const node = (verb: "kill" | "start", i: number) => fetch(`${control}/${verb}/${i}`, { method: "POST" }).then((r) => r.json());

async function until<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what}: still ${JSON.stringify(v)}`);
    await sleep(250);
  }
}

describe("a replicated layout on a 3-node cluster", () => {
  it("goes from R1 to R3 in place, keeping messages and records; /healthz names the difference until then", async () => {
    const env = testEnv(clusterUrl, backendUrl, { EAGER_RECONCILE: "false", JETSTREAM_REPLICAS: "1" });
    await provisionEnv(env);
    for (let i = 0; i < 5; i++) {
      const res = await request(env, "/v1/assignments", { method: "POST", headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true), body: JSON.stringify({ version: 1, id: `r-${i}`, backend: "pod", labels: ["x"] }) });
      expect(res.status).toBe(202);
    }
    const r3 = { ...env, JETSTREAM_REPLICAS: "3" };
    const before = await health(r3);
    expect(before.ok).toBe(false);
    const stream = env.ASSIGNMENT_STREAM!;
    expect(before.problems).toEqual([
      `stream ${stream} has 1 replicas, JETSTREAM_REPLICAS wants 3 (run \`npm run provision\`)`,
      `consumer pod has 1 replicas, JETSTREAM_REPLICAS wants 3 (run \`npm run provision\`)`,
      `KV bucket ${stream}_records has 1 replicas, JETSTREAM_REPLICAS wants 3 (run \`npm run provision\`)`,
      `KV bucket ${stream}_admission has 1 replicas, JETSTREAM_REPLICAS wants 3 (run \`npm run provision\`)`,
    ]);

    const config = loadConfig(r3);
    const done = await withNats(config, (h) => provision(h, config));
    expect(done).toEqual(expect.arrayContaining([`stream ${stream}: updated (R1 → R3)`, `bucket ${stream}_records: updated (R1 → R3)`, `bucket ${stream}_admission: updated (R1 → R3)`]));
    const after = await until("R3 layout healthy", () => health(r3), (h) => h.ok);
    expect(after.stream).toMatchObject({ replicas: 3, messages: 5 });
    expect(await streamState(r3)).toMatchObject({ messages: 5, pending: 5 });
    for (let i = 0; i < 5; i++) {
      const view = await request(r3, `/v1/assignments/r-${i}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
      expect(await view.json()).toMatchObject({ id: `r-${i}`, state: "received" });
    }
    // Provisioning again changes nothing.
    expect(await withNats(config, (h) => provision(h, config))).toContain(`stream ${stream}: updated`);
  });

  it("/healthz names a replica whose server is down, and is healthy again once it is back", async () => {
    const env = testEnv(clusterUrl, backendUrl, { EAGER_RECONCILE: "false", JETSTREAM_REPLICAS: "3" });
    await provisionEnv(env);
    await until("healthy", () => health(env), (h) => h.ok);
    await node("kill", 2);
    try {
      const down = await until("a replica reported offline", () => health(env), (h) => h.problems.some((p) => /replica on \S+-n3 (is offline|lags)/.test(p)));
      expect(down.ok).toBe(false);
      for (const p of down.problems) expect(p).toMatch(/\((bring that NATS server back|it catches up by itself.*)\)$/);
    } finally {
      await node("start", 2);
    }
    await until("healthy again", () => health(env), (h) => h.ok, 45_000);
  });
});
