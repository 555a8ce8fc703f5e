// GET /metrics: Prometheus text that a real exposition-format parser accepts, figures that match a
// known state, and a scrape whose NATS requests do not grow with the number of assignments.
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";
import { claimTokenOf, bearer, captureLogs, request, sleep } from "../harness/worker.ts";

const METRICS_TOKEN = "metrics-token-0123456789abcdef";
const proxy = inject("natsProxyUrl");
const requestsOf = async (tag: string) => ((await (await fetch(`${proxy.replace("ws://", "http://")}/_counts/${tag}`)).json()) as { pub: number }).pub;

type Parsed = { name: string; type: string; help: string; metrics: { value: string; labels?: Record<string, string> }[] }[];
const valueOf = (parsed: Parsed, name: string, labels: Record<string, string> = {}) => {
  const family = parsed.find((f) => f.name === name);
  const sample = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  return sample ? Number(sample.value) : undefined;
};

it("answers 404 without METRICS_TOKEN, 401 for a token one character off, and the state as Prometheus text", async () => {
  const logs = captureLogs();
  let cost: number | undefined;
  try {
    const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 5, EAGER_RECONCILE: "false", RETRY_DELAY_MS: 50, METRICS_TOKEN });
    const config = await provisionEnv(env);
    const post = (id: string) =>
      request(env, "/v1/assignments", {
        method: "POST",
        headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true),
        body: JSON.stringify({ version: 1, id, backend: "pod", labels: ["x"] }),
      });
    // Two that run: provisioned, claimed, acknowledged (by their claims: no pass is left anything).
    for (const id of ["run-1", "run-2"]) expect((await post(id)).status).toBe(202);
    expect((await createDispatcher({ config }).reconcile("test", 5_000))[0]).toMatchObject({ fetched: 2, naked: 2 });
    for (const id of ["run-1", "run-2"]) {
      const res = await request(env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(await claimTokenOf(env, id)) });
      expect(res.status).toBe(200);
    }
    await sleep(100);
    expect((await createDispatcher({ config }).reconcile("test", 5_000))[0]).toMatchObject({ fetched: 0, acked: 0 });
    // Three queued.
    for (const id of ["q-1", "q-2", "q-3"]) expect((await post(id)).status).toBe(202);

    expect((await request({ ...env, METRICS_TOKEN: "" }, "/metrics", { headers: bearer(METRICS_TOKEN) })).status).toBe(404);
    expect((await request(env, "/metrics")).status).toBe(401);
    expect((await request(env, "/metrics", { headers: bearer(`${METRICS_TOKEN.slice(0, -1)}g`) })).status).toBe(401);
    expect((await request(env, "/metrics", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).status).toBe(401);

    const res = await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await res.text();
    for (const secret of [METRICS_TOKEN, TEST_SECRETS.DISPATCH_TOKEN, TEST_SECRETS.CLAIM_SIGNING_KEY, TEST_SECRETS.BACKEND_TOKEN])
      expect(text).not.toContain(secret);
    const parsed = parsePrometheusTextFormat(text) as Parsed;
    for (const family of parsed) {
      expect(family.help, family.name).not.toBe("");
      expect(family.name.endsWith("_total")).toBe(family.type === "COUNTER");
    }
    const pod = { backend: "pod" };
    expect({
      capacity: valueOf(parsed, "gdr_capacity", pod),
      slots: valueOf(parsed, "gdr_slots_in_use", pod),
      registering: valueOf(parsed, "gdr_registrations_in_progress", pod),
      queued: valueOf(parsed, "gdr_consumer_pending_messages", pod),
      ackPending: valueOf(parsed, "gdr_consumer_ack_pending_messages", pod),
      streamMessages: valueOf(parsed, "gdr_stream_messages"),
      received: valueOf(parsed, "gdr_assignments", { ...pod, state: "received" }),
      waiting: valueOf(parsed, "gdr_assignments", { ...pod, state: "capacity_wait" }),
      pending: valueOf(parsed, "gdr_assignments", { ...pod, state: "backend_pending" }),
      ready: valueOf(parsed, "gdr_assignments", { ...pod, state: "backend_ready" }),
      running: valueOf(parsed, "gdr_assignments", { ...pod, state: "claimed" }),
      published: valueOf(parsed, "gdr_stream_published_messages_total"),
      acked: valueOf(parsed, "gdr_stream_acked_messages_total"),
      delivered: valueOf(parsed, "gdr_consumer_delivered_messages_total", pod),
    }).toEqual({
      capacity: 5,
      slots: 2,
      registering: 0,
      queued: 3,
      ackPending: 0,
      streamMessages: 3,
      received: 3,
      waiting: 0,
      pending: 0,
      ready: 0,
      running: 2,
      published: 5,
      acked: 2,
      // Each message once: its claim acked it, no pass had it delivered again.
      delivered: 2,
    });

    // The cost of a scrape does not grow with the assignments: the same requests with 23 more queued.
    const scrape = async (tag: string) => {
      const res = await request({ ...env, NATS_URL: `${proxy}/${tag}` }, "/metrics", { headers: bearer(METRICS_TOKEN) });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      await sleep(50);
      return requestsOf(tag);
    };
    const before = await scrape(`m-${config.stream}-a`);
    for (let i = 0; i < 20; i++) expect((await post(`more-${i}`)).status).toBe(202);
    const after = await scrape(`m-${config.stream}-b`);
    expect(after).toBe(before);
    expect(before).toBeLessThanOrEqual(6);
    cost = before;
  } finally {
    logs.restore();
    if (cost !== undefined) console.log(`a scrape made ${cost} NATS requests (one backend)`);
  }
});

// First come first served, the pass stops at MaxAckPending and two stay queued; with fair share,
// the one that finds no slot goes into the wait set, acked, and the pass pulls on: all three wait.
it.each([
  ["off", { received: 2, capacity_wait: 1 }],
  ["on", { received: 0, capacity_wait: 3 }],
])("counts the assignments waiting for capacity apart from those queued and those running (FAIR_SHARE=%s)", async (fairShare, waiting) => {
  const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), {
    CAPACITY_POD: 2,
    EAGER_RECONCILE: "false",
    RETRY_DELAY_MS: 50,
    METRICS_TOKEN,
    FAIR_SHARE: fairShare,
  });
  const config = await provisionEnv(env);
  const logs = captureLogs();
  const post = (id: string) =>
    request(env, "/v1/assignments", {
      method: "POST",
      headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true),
      body: JSON.stringify({ version: 1, id, backend: "pod", labels: ["x"] }),
    });
  try {
    for (const id of ["w-1", "w-2", "w-3", "w-4", "w-5"]) expect((await post(id)).status).toBe(202);
    // Two are provisioned; one of them claims. First come first served, MaxAckPending = capacity
    // hands out only those two; with fair share the window is wider, and the other three reach the
    // wait set in the same pass.
    expect((await createDispatcher({ config }).reconcile("test", 5_000))[0]).toMatchObject({ fetched: fairShare === "on" ? 5 : 2 });
    expect((await request(env, "/v1/assignments/w-1/claim", { method: "POST", headers: bearer(await claimTokenOf(env, "w-1")) })).status).toBe(200);
    await sleep(100);
    // The pass acks the claimed one; the next is handed out and finds no slot.
    await createDispatcher({ config }).reconcile("test", 5_000);
    const parsed = parsePrometheusTextFormat(await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text()) as Parsed;
    const states = Object.fromEntries(
      ["received", "capacity_wait", "backend_pending", "backend_ready", "claimed"].map((state) => [
        state,
        valueOf(parsed, "gdr_assignments", { backend: "pod", state }),
      ]),
    );
    expect(states).toEqual({ ...waiting, backend_pending: 0, backend_ready: 1, claimed: 1 });
    expect(valueOf(parsed, "gdr_slots_in_use", { backend: "pod" })).toBe(2);
  } finally {
    logs.restore();
  }
});
