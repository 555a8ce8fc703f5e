// A repository name becomes KV keys (QUOTAS places) and subject tokens (the wait set): a name no
// Gitea or Forgejo gives is refused where it enters, naming the field, and one delivery whose data
// or keys fail fails alone, never its batch. Against the real nats-server, through the app.
import { describe, expect, inject, it } from "vitest";
import { encodeAssignment, type Assignment } from "../../src/model/assignment.ts";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { createApp } from "../../src/http/app.ts";
import { assignmentSubject } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { assignment, giteaTestEnv, provisionEnv, TEST_SECRETS, testEnv } from "../harness/env.ts";
import { streamState } from "../harness/nats.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
const app = createApp({ dispatcher: (env) => createDispatcher({ config: loadConfig(env as Record<string, string>), sink: quiet }) });

const job = (repository: string, id = 1) => ({ id, runId: id, attempt: 1, repository });
const post = (env: Record<string, string>, body: unknown) =>
  app.request(
    "/v1/assignments",
    { method: "POST", headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) },
    env,
  );

const BAD = [
  ["a space", "Acme Corp/app"],
  ["a plus", "acme/c++"],
  ["a star", "acme/*"],
  ["a '>'", "acme/>"],
  ["non-ASCII", "acmé/app"],
  ["257 characters", `acme/${"r".repeat(252)}`],
  ["no owner", "/app"],
  ["a second slash", "acme/app/x"],
  ["a '='", "acme/a=b"],
] as const;
const GOOD = ["acme/app.js", "Acme/.github", "a-b_c/d.e-f", `acme/${"r".repeat(251)}`, "constructor/__proto__"];

describe("repository names", () => {
  it.each(BAD)("POST /v1/assignments with %s is a 400 naming job.repository, and nothing is published", async (_what, repository) => {
    const env = testEnv(nats, backendUrl);
    await provisionEnv(env);
    const res = await post(env, { ...assignment("x-1"), job: job(repository) });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { fields: { field: string }[] };
    expect(body.fields.map((f) => f.field)).toEqual(["job.repository"]);
    expect(await streamState(env)).toMatchObject({ messages: 0 });
  });

  it("names Gitea gives, dots and 256 characters among them, are taken and key their QUOTAS places", async () => {
    const env = testEnv(nats, backendUrl, { QUOTAS: JSON.stringify({ default: { repository: 1 } }) });
    await provisionEnv(env);
    for (const [i, repository] of GOOD.entries()) expect((await post(env, { ...assignment(`ok-${i}`), job: job(repository, i + 1) })).status).toBe(202);
    // The app reconciles after each publish; a pass of our own finishes whatever is left.
    const d = createDispatcher({ config: loadConfig(env), sink: quiet });
    const [summary] = await d.reconcile("test", 5_000);
    expect(summary).toMatchObject({ errors: 0, termed: 0 });
    const states = await d.withState(({ records }) => Promise.all(GOOD.map((_, i) => records.get(`ok-${i}`))));
    expect(states.map((r) => r?.state)).toEqual(GOOD.map(() => "backend_ready"));
  });

  it("a Gitea webhook whose repository no Gitea names is a 400 naming repository.full_name", async () => {
    const env = giteaTestEnv(nats, backendUrl, "http://127.0.0.1:9");
    await provisionEnv(env);
    const body = JSON.stringify({
      action: "queued",
      workflow_job: { id: 5, run_id: 5, labels: ["ubuntu-latest"], status: "queued" },
      repository: { full_name: "Acme Corp/app" },
    });
    const res = await app.request(
      "/v1/gitea/webhook",
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-gitea-event": "workflow_job",
          "x-gitea-signature": await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(body)),
        },
        body,
      },
      env,
    );
    expect(res.status).toBe(400);
    expect(((await res.json()) as { fields: { field: string }[] }).fields.map((f) => f.field)).toEqual(["repository.full_name"]);
    expect(await streamState(env)).toMatchObject({ messages: 0 });
  });
});

describe("one delivery's bad data fails that delivery alone", () => {
  const publishRaw = (env: Record<string, string>, a: Assignment) =>
    withNats(loadConfig(env), (h) => h.js.publish(assignmentSubject(loadConfig(env), "pod"), encodeAssignment(a)));

  it("a message of an older release with a name that cannot key is termed; the three beside it get their runners (QUOTAS set)", async () => {
    const env = testEnv(nats, backendUrl, { QUOTAS: JSON.stringify({ default: { owner: 10 } }) });
    const config = await provisionEnv(env);
    const good = ["g-1", "g-2", "g-3"].map((id, i) => ({ ...assignment(id), job: job("acme/app", i + 1) }));
    // Straight into the stream, as a release that took any name published it.
    await publishRaw(env, good[0]!);
    await withNats(config, (h) =>
      h.js.publish(assignmentSubject(config, "pod"), new TextEncoder().encode(JSON.stringify({ ...assignment("bad-1"), job: job("Acme Corp/app", 9) }))),
    );
    for (const a of good.slice(1)) await publishRaw(env, a);
    const d = createDispatcher({ config, sink: quiet });
    const [summary] = await d.reconcile("test", 5_000);
    expect(summary).toMatchObject({ fetched: 4, termed: 1, errors: 0 });
    const records = await d.withState(({ records }) => Promise.all(good.map((a) => records.get(a.id))));
    expect(records.map((r) => r?.state)).toEqual(["backend_ready", "backend_ready", "backend_ready"]);
  });

  it("a store that refuses one delivery's QUOTAS place fails that one (nak'd, counted an error); its batch goes on", async () => {
    const env = testEnv(nats, backendUrl, { QUOTAS: JSON.stringify({ default: { owner: 10 } }), RETRY_DELAY_MS: 50 });
    const config = await provisionEnv(env);
    const ids = ["q-1", "q-2", "q-3", "q-4"];
    for (const [i, id] of ids.entries()) await publishRaw(env, { ...assignment(id), job: job("acme/app", i + 1) });
    const refusing = (state: State): State => ({
      ...state,
      quotas: {
        ...state.quotas,
        take: async (owner, repository, id, limits) =>
          id === "q-2" ? Promise.reject(new Error("invalid key")) : state.quotas.take(owner, repository, id, limits),
      },
    });
    const d = createDispatcher({ config, sink: quiet, decorateState: refusing });
    const [summary] = await d.reconcile("test", 5_000);
    expect(summary).toMatchObject({ fetched: 4, errors: 1 });
    const records = await d.withState(({ records }) => Promise.all(ids.map((id) => records.get(id))));
    expect(records.map((r) => r?.state)).toEqual(["backend_ready", "received", "backend_ready", "backend_ready"]);
    // Nak'd, not lost: once the store takes its key, the next pass gives it its runner.
    await new Promise((r) => setTimeout(r, 100));
    await createDispatcher({ config, sink: quiet }).reconcile("test", 5_000);
    expect(await d.withState(({ records }) => records.get("q-2"))).toMatchObject({ state: "backend_ready" });
  });
});
