// Property-based bad input against the HTTP API and straight into the stream: never a 5xx, never
// an invalid message published, every rejection names the field, and the Worker keeps serving.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { loadConfig } from "../../src/app/config.ts";
import { assignmentSubject } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { storedTexts, streamState } from "../harness/nats.ts";
import { bearer, captureLogs, request, tick, type Captured } from "../harness/worker.ts";

const RUNS = Number(globalThis.process?.env?.FC_RUNS ?? 60);
// A fixed seed keeps CI deterministic; FC_SEED=<n> explores others (a failure prints its seed).
const SEED = Number(globalThis.process?.env?.FC_SEED ?? 20261130);
let env: Record<string, string>;
let logs: Captured;
beforeAll(async () => {
  env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"));
  await provisionEnv(env);
  logs = captureLogs();
});
afterAll(() => logs.restore());

const jsonValue = fc.jsonValue({ maxDepth: 3 });
const almostAssignment = fc.record(
  {
    version: fc.oneof(fc.constant(1), jsonValue),
    id: fc.oneof(fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,20}$/), fc.string(), jsonValue),
    backend: fc.oneof(fc.constantFrom("pod", "vm", "lambda"), jsonValue),
    labels: fc.oneof(fc.array(fc.string({ minLength: 1, maxLength: 8 }), { maxLength: 40 }), jsonValue),
    workload: fc.oneof(fc.constant("spiffe://example.org/x"), fc.string(), jsonValue),
    createdAt: fc.oneof(fc.constant("2026-11-30T10:00:00Z"), fc.string(), jsonValue),
    job: jsonValue,
    extra: jsonValue,
  },
  { requiredKeys: [] },
);

describe("bad input never breaks the Worker", () => {
  it("POST /v1/assignments: 202 or a 4xx naming the field, never a 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(almostAssignment, jsonValue), async (body) => {
        const res = await request(env, "/v1/assignments", { method: "POST", headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true), body: JSON.stringify(body) });
        expect(res.status).toBeLessThan(500);
        const json = (await res.json()) as { fields?: { field: string; message: string }[]; error?: string };
        if (res.status === 400) {
          expect(json.fields?.length).toBeGreaterThan(0);
          for (const f of json.fields!) expect(f.field.length).toBeGreaterThan(0);
        } else if (res.status !== 202) expect([409, 413]).toContain(res.status);
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it("webhook: arbitrary bodies and headers, signed or not, never a 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          jsonValue.map((v) => JSON.stringify(v)),
          fc.string(),
        ),
        fc.boolean(),
        fc.constantFrom("workflow_job", "push", "ping", "", "WORKFLOW_JOB"),
        async (raw, sign, event) => {
          const headers: Record<string, string> = { "content-type": "application/json", "x-gitea-event-type": event };
          if (sign) headers["x-gitea-signature"] = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
          const res = await request(env, "/v1/gitea/webhook", { method: "POST", headers, body: raw });
          expect(res.status).toBeLessThan(500);
          if (!sign) expect(res.status).toBe(401);
        },
      ),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it("garbage published straight into the stream is termed; nothing invalid is provisioned", async () => {
    const config = loadConfig(env);
    const garbage = fc.sample(
      fc.oneof(
        almostAssignment.map((v) => JSON.stringify(v)),
        fc.string(),
        fc.uint8Array().map((b) => new TextDecoder().decode(b)),
      ),
      { numRuns: 40, seed: SEED },
    );
    const before = (await streamState(env)).messages;
    await withNats(config, async (h) => {
      for (const [i, text] of garbage.entries())
        await h.js.publish(assignmentSubject(config, "pod"), new TextEncoder().encode(text), { msgID: `garbage-${i}` });
    });
    expect((await streamState(env)).messages).toBe(before + garbage.length);
    await tick(env);
    expect(logs.events().filter((e) => e.event === "invalid").length).toBeGreaterThanOrEqual(garbage.length - 2);
    // Still serving.
    expect((await request(env, "/healthz")).status).toBe(200);
    for (const text of await storedTexts(env)) expect(text).not.toContain(TEST_SECRETS.DISPATCH_TOKEN);
  });
});
