// FORGE=forgejo end to end in workerd, against the fake Forgejo (every request checked against
// forgejo-v15.json at the end of each test) and the real nats-server: jobs found by the poller
// object, each published once, its runner registered over REST and bound to its job's handle;
// claims, completions and cancels read from the waiting list; the poller's faults.
import { afterEach, describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/dispatcher.ts";
import { loadConfig } from "../../src/config.ts";
import { createForgejoClient } from "../../src/forge/forgejo/client.ts";
import { pollForgejo, type KnownStore } from "../../src/forge/forgejo/poller.ts";
import type { KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { forgejoTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { forgejoControl, knownOf, poll } from "../harness/forgejo.ts";
import { checkForgejoRequests } from "../harness/forgejo-contract.ts";
import { backendControl, bearer, logsOfEachTest, request, sleep } from "../harness/worker.ts";

const logs = logsOfEachTest();
let checked: Record<string, string> | undefined;
afterEach(async () => {
  // Whatever the test did, every request the Worker sent Forgejo is an operation of Forgejo 15.
  if (checked) expect(checkForgejoRequests((await forgejoControl(checked).state()).requests)).toEqual([]);
  checked = undefined;
});

async function setup(overrides: Record<string, unknown> = {}) {
  const env = forgejoTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("forgejoUrl"), { RETRY_DELAY_MS: 50, ...overrides });
  await provisionEnv(env);
  checked = env;
  return { env, forgejo: forgejoControl(env), backend: backendControl(env) };
}

const view = async (env: Record<string, string>, id: string) => {
  const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  return res.status === 200 ? ((await res.json()) as { state: string; giteaRunnerId: number | null; reason: string | null }) : null;
};

async function until(done: () => Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error("timed out");
    await sleep(50);
  }
}

/** A second poller with its own memory, as in another isolate (not the object). */
function otherPoller(env: Record<string, string>) {
  const config = loadConfig(env);
  const known = new Map<string, KnownJob>();
  const store: KnownStore = { all: async () => new Map(known), put: async (k, v) => void known.set(k, v), delete: async (k) => void known.delete(k) };
  const client = createForgejoClient({ url: config.forgejo!.url, apiToken: config.forgejo!.apiToken, timeoutMs: 5_000 });
  return async () => {
    const d = createDispatcher({ config, shareConnection: true });
    try {
      return await pollForgejo(d, client, config.forgejo!, store);
    } finally {
      await d.close();
    }
  };
}

describe("FORGE=forgejo", () => {
  it("a waiting job polled twice, and by two pollers at once, is one assignment with one runner registered over REST and bound to its handle", async () => {
    const { env, forgejo, backend } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    const [a, b] = await Promise.all([poll(env), otherPoller(env)()]);
    expect(a.ok && b.ok).toBe(true);
    expect(a.published + b.published).toBe(1);
    expect((await poll(env)).published).toBe(0);
    await until(async () => (await backend.state()).runners.length === 1 && (await view(env, id))?.state === "backend_ready");
    await poll(env);
    const state = await forgejo.state();
    expect(state.registrations).toBe(1);
    expect(state.runners).toMatchObject([{ name: `gdr-${id}`, ephemeral: true }]);
    const put = (await backend.state()).requests.find((r) => r.method === "PUT")!;
    const body = JSON.parse(put.body) as { forgejo: { handle: string; uuid: string; token: string; url: string; labels: string[] }; runner?: unknown };
    expect(body.forgejo).toMatchObject({ handle: job!.handle, uuid: state.runners[0]!.uuid, token: state.runners[0]!.token, url: env.GITEA_URL, labels: JSON.parse(env.RUNS_ON_ROUTES!)[0].labels });
    expect(body.runner).toBeUndefined();
    expect((await view(env, id))?.giteaRunnerId).toBe(state.runners[0]!.id);
    expect(logs().events().filter((e) => e.event === "published")).toHaveLength(1);
    // No token of Forgejo's in any log line.
    expect(logs().lines.join("\n")).not.toContain(state.runners[0]!.token);
    expect(logs().lines.join("\n")).not.toContain(env.GITEA_API_TOKEN);
  });

  it("an idle Forgejo costs one request per poll, and its null list is no jobs", async () => {
    const { env, forgejo } = await setup();
    for (let i = 0; i < 3; i++) expect(await poll(env)).toMatchObject({ ok: true, listed: 0, published: 0 });
    const requests = (await forgejo.state()).requests;
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual(Array(3).fill("GET /api/v1/admin/actions/runners/jobs"));
  });
});
