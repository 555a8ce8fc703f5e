// The HTTP API's refusals and health report, through app.request inside workerd.
import { written } from "../harness/memory.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { withNats } from "../../src/nats/connection.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { app } from "../../src/index.ts";
import { claimAssignment } from "../../src/domain/operations.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { provisionEnv, testEnv, TEST_SECRETS, testClaimToken, uniqueName } from "../harness/env.ts";
import { inParallel } from "../harness/jobs.ts";
import { HEALTH_TTL_MS } from "../../src/http/health.ts";
import { PROVISION } from "../../src/nats/layout-inspect.ts";
import { streamState } from "../harness/nats.ts";
import { claimTokenOf, answerMs, backendControl, bearer, captureLogs, request, sleep, withBindings } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const json = (token: string = TEST_SECRETS.DISPATCH_TOKEN) => bearer(token, true);
const body = (id: string, extra: Record<string, unknown> = {}) => JSON.stringify({ version: 1, id, backend: "pod", labels: ["ubuntu-latest"], ...extra });
const post = (env: Record<string, string>, init: RequestInit) => app.request("/v1/assignments", { method: "POST", ...init }, env);

describe("POST /v1/assignments refusals", () => {
  const env = testEnv(nats, backendUrl);

  it("401 without or with a wrong dispatch token", async () => {
    expect((await post(env, { headers: { "content-type": "application/json" }, body: body("a") })).status).toBe(401);
    const res = await post(env, { headers: json("not-the-dispatch-token"), body: body("a") });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: "a valid Bearer DISPATCH_TOKEN is required" });
  });

  it("415 for a body that is not JSON by content type", async () => {
    const res = await post(env, { headers: { ...bearer(TEST_SECRETS.DISPATCH_TOKEN), "content-type": "text/plain" }, body: body("a") });
    expect(res.status).toBe(415);
  });

  it("413 for a body over 16 KiB, declared or streamed", async () => {
    const big = body("a", { job: { id: 1, runId: 1, attempt: 1, repository: "x".repeat(17_000) } });
    expect((await post(env, { headers: json(), body: big })).status).toBe(413);
    const stream = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(big));
        c.close();
      },
    });
    expect((await post(env, { headers: json(), body: stream, duplex: "half" } as RequestInit)).status).toBe(413);
  });

  it("400 naming every failing field", async () => {
    const res = await post(env, { headers: json(), body: JSON.stringify({ version: 2, id: "-bad", backend: "Lambda", labels: [], extra: 1 }) });
    expect(res.status).toBe(400);
    const fields = ((await res.json()) as { fields: { field: string }[] }).fields.map((f) => f.field);
    expect(fields).toEqual(expect.arrayContaining(["version", "id", "backend", "labels", "extra"]));
    // A backend name no configuration names: 400 on that field alone.
    const unnamed = await post(env, { headers: json(), body: body("a", { backend: "lambda" }) });
    expect(unnamed.status).toBe(400);
    expect(await unnamed.json()).toMatchObject({
      fields: [{ field: "backend", message: "backend lambda is disabled (not in BACKENDS, or at capacity 0 there)" }],
    });
    const notJson = await post(env, { headers: json(), body: "{" });
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ fields: [{ field: "(body)" }] });
    const foreign = await post(env, { headers: json(), body: body("a", { workload: "spiffe://evil.org/x" }) });
    expect(await foreign.json()).toMatchObject({ fields: [{ field: "workload", message: "must be in trust domain example.org" }] });
    const disabled = await post(env, { headers: json(), body: body("a", { backend: "vm" }) });
    expect(await disabled.json()).toMatchObject({ fields: [{ field: "backend", message: expect.stringContaining("CAPACITY_VM=0") }] });
  });

  it("503 when NATS cannot be reached, saying nothing was queued", async () => {
    const down = { ...env, NATS_URL: "ws://127.0.0.1:9" };
    const res = await post(down, { headers: json(), body: body("a") });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toContain("nothing was queued");
  });

  it("503 and no record left behind when the stream does not confirm the publish", async () => {
    const own = testEnv(nats, backendUrl);
    const config = await provisionEnv(own);
    await withNats(config, async (h) => (await jetstreamManager(h.nc)).streams.delete(config.stream));
    const res = await post(own, { headers: json(), body: body("lost") });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toContain("nothing was queued");
    expect((await app.request("/v1/assignments/lost", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }, own)).status).toBe(404);
  });
});

describe("runner endpoints", () => {
  it("a token holder's claim that comes while the pass waits for the backend is taken at once, and the pass's write keeps it", async () => {
    const env = testEnv(nats, backendUrl);
    const d = createDispatcher({ config: await provisionEnv(env) });
    await backendControl(env).mode({ token: TEST_SECRETS.BACKEND_TOKEN, delayMs: 400 });
    // Published straight through the domain operation: the record says `received` until the pass
    // below writes it after the backend's answer, and the runner claims before that.
    await publishAssignment(d, JSON.parse(body("early-1")));
    const pass = d.reconcile("test", 5_000);
    while (!(await backendControl(env).state()).requests.some((r) => r.path.endsWith("/early-1"))) await sleep(20);
    expect((await d.withState((s) => s.records.get("early-1")))?.state).toBe("received");
    const own = await claimTokenOf(env, "early-1");
    const logs = captureLogs();
    let res: Response;
    try {
      res = await request(env, "/v1/assignments/early-1/claim", { method: "POST", headers: bearer(own) });
    } finally {
      logs.restore();
    }
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: "early-1", state: "claimed" });
    expect(answerMs(res)).toBeLessThan(300);
    // The pass that asked for the runner sees the claim at its write: the claim starts no pass.
    expect(logs.events().filter((e) => e.event === "reconcile_summary")).toEqual([]);
    const [summary] = await pass;
    expect(summary).toMatchObject({ fetched: 1, acked: 1 });
    expect((await d.withState((s) => s.records.get("early-1")))?.state).toBe("claimed");
    expect(await streamState(env)).toEqual({ pending: 0, ackPending: 0, messages: 0 });
    // Near misses: another assignment's token, and a terminated record, are still refused.
    await publishAssignment(d, JSON.parse(body("early-2")));
    expect((await app.request("/v1/assignments/early-2/claim", { method: "POST", headers: bearer(own) }, env)).status).toBe(403);
    await d.withState((s) => s.records.update("early-2", (r) => written({ ...r, state: "terminated", reason: "cancelled" })));
    const second = await claimTokenOf(env, "early-2");
    expect((await app.request("/v1/assignments/early-2/claim", { method: "POST", headers: bearer(second) }, env)).status).toBe(409);
  });

  it("a token holder's claim while the record says capacity_wait is taken and counted; a wrong token in that state is refused", async () => {
    const env = testEnv(nats, backendUrl);
    const d = createDispatcher({ config: await provisionEnv(env) });
    await publishAssignment(d, JSON.parse(body("wait-1")));
    await publishAssignment(d, JSON.parse(body("wait-2")));
    await d.withState((s) => s.records.update("wait-1", (r) => written({ ...r, state: "capacity_wait" })));
    const own = await claimTokenOf(env, "wait-1");
    const claim = (token: string) => app.request("/v1/assignments/wait-1/claim", { method: "POST", headers: bearer(token) }, env);
    for (const wrong of [await claimTokenOf(env, "wait-2"), own.slice(0, -1) + (own.endsWith("A") ? "B" : "A")]) expect((await claim(wrong)).status).toBe(403);
    expect((await d.withState((s) => s.records.get("wait-1")))?.state).toBe("capacity_wait");
    const logs = captureLogs();
    let res: Response;
    try {
      res = await claim(own);
    } finally {
      logs.restore();
    }
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: "wait-1", state: "claimed" });
    expect(
      logs
        .events()
        .filter((e) => e.event === "claimed")
        .map((e) => e.assignment),
    ).toEqual(["wait-1"]);
    expect((await d.withState((s) => s.records.get("wait-1")))?.state).toBe("claimed");
  });

  it("a Gitea runner's claim counts only once its registration is stored, whatever the state", async () => {
    const env = testEnv(nats, backendUrl);
    const d = createDispatcher({ config: await provisionEnv(env) });
    await publishAssignment(d, JSON.parse(body("early-3")));
    await expect(claimAssignment(d, "early-3", { runnerId: 7 })).rejects.toThrow(/not the runner registered/);
    expect((await d.withState((s) => s.records.get("early-3")))?.state).toBe("received");
  });

  it("refuse missing, wrong and another assignment's claim tokens; 404 unknown; 409 out of order", async () => {
    const env = testEnv(nats, backendUrl);
    // Published straight through the domain operation: no eager reconcile provisions it.
    await publishAssignment(createDispatcher({ config: await provisionEnv(env) }), JSON.parse(body("r-1")));
    const call = async (id: string, verb: string, token?: string) =>
      (await app.request(`/v1/assignments/${id}/${verb}`, { method: "POST", headers: token ? bearer(token) : {} }, env)).status;
    expect(await call("r-1", "claim")).toBe(401);
    expect(await call("r-1", "claim", "garbage")).toBe(403);
    expect(await call("r-1", "claim", await claimTokenOf(env, "r-2"))).toBe(403);
    expect(await call("r-1", "claim", TEST_SECRETS.DISPATCH_TOKEN)).toBe(403);
    expect(await call("nope", "claim", await testClaimToken("nope"))).toBe(404);
    const own = await claimTokenOf(env, "r-1");
    // Not yet claimed (no reconcile ran in this test): complete is refused and changes nothing.
    expect(await call("r-1", "complete", own)).toBe(409);
    const view = await app.request("/v1/assignments/r-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }, env);
    expect(await view.json()).toMatchObject({ id: "r-1", state: "received", backend: "pod", claimedAt: null });
    expect((await app.request("/v1/assignments/r-1", {}, env)).status).toBe(401);
    expect((await app.request("/v1/assignments/missing", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }, env)).status).toBe(404);
  });
});

describe("NATS trouble", () => {
  it("is 503 on every route when JetStream has no responders, never 500", async () => {
    const env = { ...testEnv(nats, backendUrl), NATS_URL: inject("natsNoJetStreamWsUrl") };
    const id = "nr-1";
    const token = await testClaimToken(id);
    const calls: [string, RequestInit][] = [
      ["/v1/assignments", { method: "POST", headers: json(), body: body(id) }],
      [`/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }],
      [`/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(token) }],
      [`/v1/assignments/${id}/complete`, { method: "POST", headers: bearer(token) }],
    ];
    for (const [path, init] of calls) {
      const res = await app.request(path, init, env);
      expect(res.status, path).toBe(503);
      expect(((await res.json()) as { error: string }).error, path).toMatch(/NATS/);
    }
  });
});

describe("GET /healthz", () => {
  it("200 once provisioned; stream and consumer counts only with the dispatch token", async () => {
    const env = testEnv(nats, backendUrl);
    await provisionEnv(env);
    const anonymous = await app.request("/healthz", {}, withBindings(env));
    expect(anonymous.status).toBe(200);
    expect(await anonymous.json()).toEqual({ ok: true, nats: { ok: true }, problems: [], cache: { on: false } });
    const res = await app.request("/healthz", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }, env);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      ok: true,
      nats: { ok: true },
      stream: { name: env.ASSIGNMENT_STREAM, messages: 0 },
      consumers: { pod: { pending: 0 } },
    });
    const wrong = await app.request("/healthz", { headers: bearer(`${TEST_SECRETS.DISPATCH_TOKEN}x`) }, env);
    expect(wrong.status).toBe(401);
    expect(await wrong.text()).not.toContain("consumers");
  });

  it("without credentials, 200 requests at 20 at once cost one NATS connection; the answer is at most a few seconds old", async () => {
    const tag = uniqueName("hz");
    const direct = testEnv(nats, backendUrl);
    const config = await provisionEnv(direct);
    // One env object, as workerd hands every request of an isolate.
    const env = withBindings({ ...direct, NATS_URL: `${inject("natsProxyUrl")}/${tag}` });
    const counts = async () =>
      (await (await fetch(`${inject("natsProxyUrl").replace("ws://", "http://")}/_counts/${tag}`)).json()) as { connections: number; request: number };
    const statuses: number[] = [];
    await inParallel(
      Array.from({ length: 200 }, (_, i) => i),
      20,
      async () => {
        statuses.push((await app.request("/healthz", {}, env)).status);
      },
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(200);
    const after = await counts();
    // A check that outlived the 3 s a cached answer serves would add one: a handful at most.
    expect(after.connections).toBeLessThanOrEqual(2);
    expect(after.request).toBeLessThanOrEqual(2 * 8);
    // The dispatch token's answer is never kept: it looks now.
    expect((await app.request("/healthz", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) }, env)).status).toBe(200);
    expect((await counts()).connections).toBe(after.connections + 1);

    // What it reports follows the truth within HEALTH_TTL_MS.
    await withNats(config, async (h) => (await jetstreamManager(h.nc)).consumers.delete(config.stream, "pod"));
    await sleep(HEALTH_TTL_MS + 100);
    const broken = await app.request("/healthz", {}, env);
    expect(broken.status).toBe(503);
    expect(((await broken.json()) as { problems: string[] }).problems).toEqual([
      `consumer pod on stream ${config.stream} is missing (CAPACITY_POD > 0: ${PROVISION})`,
    ]);
  });

  it("warns, still 200, when NATS_GATEWAY=on has no Durable Object binding; not when it is off", async () => {
    const env = testEnv(nats, backendUrl);
    await provisionEnv(env);
    const unbound = await app.request("/healthz", {}, env);
    expect(unbound.status).toBe(200);
    expect(((await unbound.json()) as { warnings: string[] }).warnings).toEqual([
      expect.stringMatching(/^NATS_GATEWAY=on, but the Durable Object binding NATS_GATEWAY_DO is missing: .*set NATS_GATEWAY=off$/),
    ]);
    const off = await app.request("/healthz", {}, { ...env, NATS_GATEWAY: "off" });
    expect(await off.json()).toEqual({ ok: true, nats: { ok: true }, problems: [], cache: { on: false } });
  });

  it("names an unreachable NATS by scheme, host and port only: no user, password, path or query", async () => {
    const env = testEnv(nats, backendUrl);
    const urls = "ws://gdr:p@ss-w0rd@127.0.0.1:9/path?auth_token=tok-secret-1,wss://u:pw2@127.0.0.2:9?token=tok-secret-2";
    const res = await app.request("/healthz", {}, { ...env, NATS_URL: urls });
    expect(res.status).toBe(503);
    const text = await res.text();
    for (const secret of ["gdr", "p@ss", "ss-w0rd", "tok-secret-1", "tok-secret-2", "pw2", "/path", "auth_token"]) expect(text).not.toContain(secret);
    expect(JSON.parse(text).problems[0]).toMatch(/^NATS unreachable at ws:\/\/127\.0\.0\.1:9,wss:\/\/127\.0\.0\.2:9: /);
  });

  it("503 naming exactly what is missing", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_VM: 2, VM_BACKEND_URL: "http://127.0.0.1:9" });
    const config = await provisionEnv({ ...env, CAPACITY_VM: "0" });
    await withNats(config, async (h) => (await jetstreamManager(h.nc)).consumers.delete(config.stream, "pod"));
    const res = await app.request("/healthz", {}, env);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { problems: string[] }).problems).toEqual([
      `consumer pod on stream ${env.ASSIGNMENT_STREAM} is missing (CAPACITY_POD > 0: ${PROVISION})`,
      `consumer vm on stream ${env.ASSIGNMENT_STREAM} is missing (CAPACITY_VM > 0: ${PROVISION})`,
      `stream ${env.ASSIGNMENT_STREAM}_slots_vm is missing (CAPACITY_VM: ${PROVISION})`,
    ]);
  });

  it("503 when NATS is down or the configuration is invalid, without secrets", async () => {
    const env = testEnv(nats, backendUrl);
    const down = await app.request("/healthz", {}, { ...env, NATS_URL: "ws://127.0.0.1:9" });
    expect(down.status).toBe(503);
    expect(await down.json()).toMatchObject({ ok: false, nats: { ok: false } });
    const bad = await app.request("/healthz", {}, { ...env, DISPATCH_TOKEN: "short", TRUST_DOMAIN: "" });
    expect(bad.status).toBe(503);
    const text = await bad.text();
    expect(text).toContain("DISPATCH_TOKEN must be at least 16 characters");
    expect(text).toContain("TRUST_DOMAIN is required");
    expect(text).not.toContain(TEST_SECRETS.CLAIM_SIGNING_KEY);
    expect(loadConfig(env).stream).toBe(env.ASSIGNMENT_STREAM);
    // Elsewhere the problems are not told: a plain 500.
    for (const path of ["/v1/assignments/x", "/v1/gitea/webhook", "/nope"]) {
      const res = await app.request(path, {}, { ...env, DISPATCH_TOKEN: "short", TRUST_DOMAIN: "" });
      expect(res.status).toBe(500);
      expect(await res.json()).toEqual({ error: "dispatcher is misconfigured" });
    }
  });
});
