// The whole handoff inside workerd, against the real nats-server and a local `http` backend.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { encodeAssignment } from "../../src/model/assignment.ts";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { assignmentSubject } from "../../src/nats/names.ts";
import { HOLD_MS } from "../../src/reconcile/hold.ts";
import { withNats } from "../../src/nats/connection.ts";
import { assignment, provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";
import { storedTexts, streamState } from "../harness/nats.ts";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import worker from "../../src/index.ts";
import { claimTokenOf, backendControl, bearer, captureLogs, request, sleep, tick, type Captured } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

const post = (env: Record<string, string>, body: unknown) =>
  request(env, "/v1/assignments", { method: "POST", headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true), body: JSON.stringify(body) });
const state = async (env: Record<string, string>, id: string) =>
  (await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string };
const runnerCall = async (env: Record<string, string>, id: string, verb: "claim" | "complete", token?: string) =>
  request(env, `/v1/assignments/${id}/${verb}`, { method: "POST", headers: bearer(token ?? (await claimTokenOf(env, id))) });
const eventsOf = (id: string) =>
  logs
    .events()
    .filter((e) => e.assignment === id)
    .map((e) => e.event);

async function publishRaw(env: Record<string, string>, items: { data: Uint8Array; msgID: string }[]) {
  const config = loadConfig(env);
  await withNats(config, async (h) => {
    for (const item of items) await h.js.publish(assignmentSubject(config, "pod"), item.data, { msgID: item.msgID });
  });
}

describe("handoff in workerd", () => {
  it("a pass's verdicts have reached the server when the pass returns, before the connection is drained", async () => {
    const env = testEnv(nats, backendUrl);
    await provisionEnv(env);
    await publishRaw(env, [{ data: new TextEncoder().encode("not an assignment"), msgID: "garbage-1" }]);
    // 100 ms each way: a term the pass did not flush is still on its way when the pass returns.
    const far = createDispatcher({ config: loadConfig({ ...env, NATS_URL: inject("natsSlowProxyUrl") }), shareConnection: true });
    try {
      expect((await far.reconcile("test", 10_000))[0]).toMatchObject({ fetched: 1, termed: 1 });
      expect(await streamState(env)).toEqual({ pending: 0, ackPending: 0, messages: 0 });
    } finally {
      await far.close();
    }
  });

  it("a failed backend call gives its slot back: capacity 1 admits the next assignment", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 1, RETRY_DELAY_MS: 60_000 });
    const config = await provisionEnv(env);
    const backend = backendControl(env);
    await backend.mode({ failFirst: 1 });
    expect((await post(env, { version: 1, id: "slot-1", backend: "pod", labels: ["x"] })).status).toBe(202);
    expect(eventsOf("slot-1").filter((e) => e !== "error")).toEqual(["published", "received", "capacity_acquired", "backend_retry"]);
    expect(await state(env, "slot-1")).toMatchObject({ state: "backend_pending" });
    // The consumer delivers no more than capacity at once (MaxAckPending), so the next assignment
    // asks admission as its pass would, while slot-1 waits out its retry delay.
    await createDispatcher({ config }).withState(async ({ admission }) => {
      expect(await admission.holders("pod")).toEqual([]);
      expect(await admission.acquire("pod", "slot-2")).toBe(true);
      expect(await admission.acquire("pod", "slot-1")).toBe(false);
    });
  });

  it("takes an assignment from POST to acked, then completes it, with no token in any log line", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 50 });
    await provisionEnv(env);
    const res = await post(env, { version: 1, id: "flow-1", backend: "pod", labels: ["ubuntu-latest"] });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ id: "flow-1", stream: env.ASSIGNMENT_STREAM, seq: 1, duplicate: false });

    // The publish reconciled the backend at once, not at the next cron tick.
    const backend = backendControl(env);
    const runners = (await backend.state()).runners;
    expect(runners).toHaveLength(1);
    expect(runners[0]).toMatchObject({ id: "flow-1", claimUrl: "https://dispatch.example.org/v1/assignments/flow-1/claim" });
    expect(await state(env, "flow-1")).toMatchObject({ state: "backend_ready", backend: "pod" });
    expect(eventsOf("flow-1")).toEqual(["published", "received", "capacity_acquired", "backend_ready", "claim_pending"]);

    // Not claimed yet: ticks keep it pending, never acked.
    await sleep(60);
    await tick(env);
    expect(await streamState(env)).toMatchObject({ messages: 1 });

    const claim = await runnerCall(env, "flow-1", "claim", runners[0]!.claimToken);
    expect(claim.status).toBe(200);
    // The claim acks the runner's message itself, without waiting for a tick or a pass.
    expect(eventsOf("flow-1").slice(-3)).toEqual(["claimed", "runner_claimed", "acked"]);
    expect((await runnerCall(env, "flow-1", "claim")).status).toBe(200); // idempotent
    expect(eventsOf("flow-1").filter((e) => e === "claimed")).toHaveLength(1);
    expect(await streamState(env)).toEqual({ pending: 0, ackPending: 0, messages: 0 });
    expect(await state(env, "flow-1")).toMatchObject({ state: "claimed" });

    const done = await runnerCall(env, "flow-1", "complete");
    expect(done.status).toBe(200);
    expect(await done.json()).toMatchObject({ state: "completed" });
    expect((await runnerCall(env, "flow-1", "complete")).status).toBe(200);
    expect((await runnerCall(env, "flow-1", "claim")).status).toBe(409);
    const after = await backend.state();
    // Torn down by the completion that completed it; the repeat changed nothing and tore nothing down.
    expect(after.requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([`/${env.ASSIGNMENT_STREAM}/runners/flow-1`]);
    expect(after.created).toBe(1);

    const secrets = [TEST_SECRETS.DISPATCH_TOKEN, TEST_SECRETS.CLAIM_SIGNING_KEY, TEST_SECRETS.BACKEND_TOKEN, runners[0]!.claimToken];
    expect(logs.lines.length).toBeGreaterThan(5);
    for (const line of logs.lines) for (const s of secrets) expect(line).not.toContain(s);
    for (const e of logs.events())
      expect(
        Object.keys(e).every((k) =>
          [
            "event",
            "assignment",
            "backend",
            "retryDelayMs",
            "reason",
            "trigger",
            "fetched",
            "acked",
            "naked",
            "termed",
            "deferred",
            "errors",
            "durationMs",
            "revisited",
            "message",
          ].includes(k),
        ),
      ).toBe(true);
  });

  it("terms an invalid and a conflicting message found in the stream", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 50 });
    await provisionEnv(env);
    expect((await post(env, { version: 1, id: "orig", backend: "pod", labels: ["a"] })).status).toBe(202);
    await publishRaw(env, [
      { data: new TextEncoder().encode("{not json"), msgID: "garbage" },
      { data: encodeAssignment({ ...assignment("evil"), workload: "spiffe://evil.org/runner/pod/evil" }), msgID: "evil" },
      { data: encodeAssignment(assignment("orig", ["b"])), msgID: "orig-again" },
    ]);
    await tick(env);
    const termed = logs.events().filter((e) => e.event === "invalid" || e.event === "conflict");
    expect(termed.map((e) => [e.event, e.reason])).toEqual(
      expect.arrayContaining([
        ["invalid", "invalid assignment"],
        ["invalid", "invalid assignment"],
        ["conflict", "conflicting assignment"],
      ]),
    );
    expect(termed).toHaveLength(3);
    expect((await backendControl(env).state()).runners.map((r) => r.id)).toEqual(["orig"]);
    expect(await streamState(env)).toMatchObject({ messages: 1 }); // only the original remains
  });

  it("holds the second assignment while capacity 1 is taken, then runs it once the first completes", async () => {
    // First come, first served: MaxAckPending is the capacity (with fair share it is wider, and
    // the second waits in the wait set instead: test/node/fair-turns.test.ts).
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 30, CAPACITY_POD: 1, FAIR_SHARE: "off" });
    await provisionEnv(env);
    await post(env, { version: 1, id: "first", backend: "pod", labels: ["a"] });
    await post(env, { version: 1, id: "second", backend: "pod", labels: ["a"] });
    expect(await state(env, "first")).toMatchObject({ state: "backend_ready" });
    expect(await state(env, "second")).toMatchObject({ state: "received" }); // MaxAckPending 1 holds it back
    await runnerCall(env, "first", "claim");
    await sleep(40);
    await tick(env);
    await sleep(40);
    await tick(env);
    expect(await state(env, "first")).toMatchObject({ state: "claimed" });
    expect(await state(env, "second")).toMatchObject({ state: "capacity_wait" });
    expect(eventsOf("second")).toContain("capacity_wait");
    expect((await backendControl(env).state()).runners.map((r) => r.id)).toEqual(["first"]);

    await runnerCall(env, "first", "complete");
    await sleep(40);
    await tick(env);
    expect(await state(env, "second")).toMatchObject({ state: "backend_ready" });
    expect((await backendControl(env).state()).runners.map((r) => r.id)).toEqual(["second"]);
  });

  it("a claim acks its runner's message itself, out on its nak delay, and starts no pass", async () => {
    // Default delays: the message waits out a claim delay of 2 s before it could come again.
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 10 });
    await provisionEnv(env);
    await post(env, { version: 1, id: "c-first", backend: "pod", labels: ["a"] });
    expect(await state(env, "c-first")).toMatchObject({ state: "backend_ready" });
    expect(await streamState(env)).toMatchObject({ messages: 1, ackPending: 1 });
    const ctx = createExecutionContext();
    const claim = new Request("https://dispatch.example.org/v1/assignments/c-first/claim", {
      method: "POST",
      headers: bearer(await claimTokenOf(env, "c-first")),
    });
    expect((await worker.fetch(claim as Request<unknown, IncomingRequestCfProperties>, env, ctx)).status).toBe(200);
    // Acked by the time the claim is answered: no pass waits 2 s for the message to come again.
    expect(await streamState(env)).toEqual({ messages: 0, ackPending: 0, pending: 0 });
    await waitOnExecutionContext(ctx);
    expect(eventsOf("c-first").slice(-3)).toEqual(["claimed", "runner_claimed", "acked"]);
    expect(logs.events().filter((e) => e.event === "reconcile_summary" && e.trigger === "claim")).toEqual([]);
  });

  it("a freed slot is taken at once by the assignment waiting for it, without a cron tick", async () => {
    // Default delays: a capacity wait is a nak of 1 to 3 s.
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 1 });
    await provisionEnv(env);
    await post(env, { version: 1, id: "holder", backend: "pod", labels: ["a"] });
    await runnerCall(env, "holder", "claim");
    expect(await state(env, "holder")).toMatchObject({ state: "claimed" });
    await post(env, { version: 1, id: "waiter", backend: "pod", labels: ["a"] });
    expect(await state(env, "waiter")).toMatchObject({ state: "capacity_wait" });
    const started = Date.now();
    // request() returns once the invocation's waitUntil work is done: the pass the release started.
    expect((await runnerCall(env, "holder", "complete")).status).toBe(200);
    expect(await state(env, "waiter")).toMatchObject({ state: "backend_ready" });
    // The release's pass waits out the longest capacity wait (3 s), far from the next cron tick.
    expect(Date.now() - started).toBeLessThan(4_500);
    expect(logs.events().filter((e) => e.event === "reconcile_summary" && e.trigger === "release")).toHaveLength(1);
  });

  it("retries a failing and a hung backend, releasing the slot, until it succeeds", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 30, CAPACITY_POD: 1, BACKEND_TIMEOUT_MS: 300 });
    await provisionEnv(env);
    const backend = backendControl(env);
    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, hangFirst: 1, hangMs: 1_000, failFirst: 2 });
    await publishRaw(env, [{ data: encodeAssignment(assignment("flaky")), msgID: "flaky" }]);
    for (let i = 0; i < 4; i++) {
      await tick(env);
      await sleep(40);
    }
    expect(eventsOf("flaky").filter((e) => e === "backend_retry")).toHaveLength(3);
    expect(eventsOf("flaky")).toContain("backend_ready");
    expect(await state(env, "flaky")).toMatchObject({ state: "backend_ready" });
    const s = await backend.state();
    expect(s.runners).toHaveLength(1);
    expect(s.requests.filter((r) => r.method === "PUT")).toHaveLength(4);
    expect(s.requests.every((r) => r.headers.authorization === `Bearer ${TEST_SECRETS.BACKEND_TOKEN}`)).toBe(true);
  });

  it("naks what the budget left unprocessed, so the next tick takes it at once", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 40, RECONCILE_BUDGET_MS: 100 });
    await provisionEnv(env);
    await backendControl(env).mode({ token: TEST_SECRETS.BACKEND_TOKEN, delayMs: 250 });
    await publishRaw(
      env,
      Array.from({ length: 24 }, (_, i) => ({ data: encodeAssignment(assignment(`b-${i}`)), msgID: `b-${i}` })),
    );
    await tick(env);
    const first = logs.events().find((e) => e.event === "reconcile_summary")! as unknown as { fetched: number; deferred: number; naked: number };
    // With 250 ms backend calls, 4 at a time, a 100 ms budget finishes at most one round of them
    // (how many exactly depends on the machine's speed); the rest is deferred.
    expect(first.fetched).toBe(24);
    expect(first.deferred).toBeGreaterThanOrEqual(8);
    expect(first.deferred + first.naked).toBe(24);
    expect(logs.events().filter((e) => e.event === "deferred")).toHaveLength(first.deferred);
    // The deferred ones are available again right away, not after AckWait (60 s); the others
    // were naked with a 2 s delay and stay out of this tick.
    await tick(env);
    const second = logs.events().filter((e) => e.event === "reconcile_summary")[1]! as unknown as { fetched: number };
    expect(second.fetched).toBe(first.deferred);
  });

  it("tears down a runner that did not claim in time and provisions afresh; nothing secret in NATS", async () => {
    const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 30, CLAIM_TIMEOUT_MS: 1_000 });
    await provisionEnv(env);
    await post(env, { version: 1, id: "slow", backend: "pod", labels: ["a"] });
    const backend = backendControl(env);
    const token = (await backend.state()).runners[0]!.claimToken;
    await sleep(1_050);
    await tick(env);
    const torn = await backend.state();
    // A ready runner is not asked about again while it waits: the timeout tears it down unasked.
    expect(eventsOf("slow").slice(-2)).toEqual(["capacity_acquired", "claim_timeout"]);
    expect(torn.requests.filter((r) => r.method === "PUT")).toHaveLength(1);
    expect(torn.requests.filter((r) => r.method === "DELETE")).toHaveLength(1);
    expect(torn.runners).toHaveLength(0);
    expect(await state(env, "slow")).toMatchObject({ state: "backend_pending", readyAt: null });

    // Every byte in the stream and the KV buckets, searched for every secret.
    const secrets = [TEST_SECRETS.DISPATCH_TOKEN, TEST_SECRETS.CLAIM_SIGNING_KEY, TEST_SECRETS.BACKEND_TOKEN, token];
    const texts = await storedTexts(env);
    expect(texts.length).toBeGreaterThan(1);
    for (const text of texts) for (const s of secrets) expect(text).not.toContain(s);

    await sleep(40);
    await tick(env);
    expect(eventsOf("slow").slice(-2)).toEqual(["backend_ready", "claim_pending"]);
    expect((await backend.state()).runners).toHaveLength(1);
    expect(await state(env, "slow")).toMatchObject({ state: "backend_ready" });
  });

  it("calls the backend at most 4 at a time, and says so loudly when it refuses our token", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 20 });
    await provisionEnv(env);
    const backend = backendControl(env);
    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, delayMs: 150 });
    await publishRaw(
      env,
      Array.from({ length: 12 }, (_, i) => ({ data: encodeAssignment(assignment(`c-${i}`)), msgID: `c-${i}` })),
    );
    await tick(env);
    const s = await backend.state();
    expect(s.calls).toBe(12);
    expect(s.maxInFlight).toBe(4);

    const refused = testEnv(nats, backendUrl);
    await provisionEnv(refused);
    await backendControl(refused).mode({ token: "rotated-elsewhere" });
    await publishRaw(refused, [{ data: encodeAssignment(assignment("auth-1")), msgID: "auth-1" }]);
    await tick(refused);
    expect(eventsOf("auth-1").filter((e) => e !== "error")).toEqual(["received", "capacity_acquired", "backend_auth", "backend_retry"]);
  });

  it("reconciles each message once per pass, even when its nak delay ends mid-pass", async () => {
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 40, BATCH_SIZE: 8, RETRY_DELAY_MS: 20 });
    await provisionEnv(env);
    // Pending runners are nak'd (ready ones would be held for their claim), so they come back mid-pass.
    await backendControl(env).mode({ token: TEST_SECRETS.BACKEND_TOKEN, delayMs: 60, readyAfter: 100 });
    await publishRaw(
      env,
      Array.from({ length: 30 }, (_, i) => ({ data: encodeAssignment(assignment(`o-${i}`)), msgID: `o-${i}` })),
    );
    await tick(env);
    const summary = logs.events().find((e) => e.event === "reconcile_summary")!;
    expect(summary).toMatchObject({ fetched: 30, naked: 30 });
    expect(summary.revisited).toBeGreaterThan(0);
    const received = logs
      .events()
      .filter((e) => e.event === "received")
      .map((e) => e.assignment);
    expect(received).toHaveLength(30);
    expect(new Set(received).size).toBe(30);
  });

  it("a cron pass holds a ready runner's message and acks it as soon as the claim lands, within the same pass", { timeout: 15_000 }, async () => {
    const env = testEnv(nats, backendUrl, { EAGER_RECONCILE: false });
    await provisionEnv(env);
    await post(env, { version: 1, id: "held", backend: "pod", labels: ["a"] });
    const backend = backendControl(env);
    const ticking = tick(env);
    while (!(await backend.state()).runners.length) await sleep(20);
    const claimedAt = Date.now();
    expect((await runnerCall(env, "held", "claim", (await backend.state()).runners[0]!.claimToken)).status).toBe(200);
    await ticking;
    const summaries = logs.events().filter((e) => e.event === "reconcile_summary");
    expect(summaries.find((e) => e.trigger === "cron * * * * *")).toMatchObject({ fetched: 1, acked: 1, naked: 0 });
    expect(eventsOf("held").slice(-2)).toEqual(["runner_claimed", "acked"]);
    // Acked once, by the claim (the delivery its registration names): the pass does not ack it again, nor tell it twice.
    expect(eventsOf("held").filter((e) => e === "acked")).toHaveLength(1);
    expect(await streamState(env)).toMatchObject({ messages: 0, ackPending: 0 });
    expect(Date.now() - claimedAt).toBeLessThan(1_000); // not the 2 s claim nak delay and a later pass

    // The claim found the hold in the record and started no pass of its own.
    expect(summaries.filter((e) => e.trigger === "claim")).toHaveLength(0);

    // Nobody claims: the pass holds for its window, looks once more, and naks with the claim delay.
    await post(env, { version: 1, id: "unclaimed", backend: "pod", labels: ["a"] });
    const started = Date.now();
    await tick(env);
    expect(Date.now() - started).toBeGreaterThanOrEqual(HOLD_MS);
    expect(
      logs
        .events()
        .filter((e) => e.event === "reconcile_summary")
        .at(-1),
    ).toMatchObject({ fetched: 1, acked: 0, naked: 1 });
    expect(await streamState(env)).toMatchObject({ messages: 1 });
  });
});
