// A Gitea webhook's signature while its secret is rotated (docs/deploy.md, "Rotating secrets"):
// the route takes a delivery signed with the new secret or the previous one, and nothing else; once
// GITEA_WEBHOOK_SECRET_PREVIOUS is gone, the old secret is refused. Through app.request, no NATS asked.
import { describe, expect, inject, it } from "vitest";
import { createApp } from "../../src/http/app.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig } from "../../src/app/config.ts";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { giteaTestEnv, TEST_SECRETS } from "../harness/env.ts";

const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
const app = createApp({ dispatcher: (env) => createDispatcher({ config: loadConfig(env as Record<string, string>), sink: quiet }) });
const OLD = "the-previous-webhook-secret";
const body = new TextEncoder().encode(JSON.stringify({ zen: "ping" }));

const deliver = async (env: Record<string, string>, secret: string, header = "x-gitea-signature") =>
  (
    await app.request(
      "/v1/gitea/webhook",
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-gitea-event": "ping",
          [header]: `${header === "x-hub-signature-256" ? "sha256=" : ""}${await giteaSignature(secret, body)}`,
        },
        body,
      },
      env,
    )
  ).status;

describe("a webhook signed during a secret rotation", () => {
  const base = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:2");
  it("takes the new secret and the previous one, and refuses a secret one character off", async () => {
    const env = { ...base, GITEA_WEBHOOK_SECRET_PREVIOUS: OLD };
    expect(await deliver(env, TEST_SECRETS.WEBHOOK_SECRET)).toBe(200);
    expect(await deliver(env, OLD)).toBe(200);
    expect(await deliver(env, OLD, "x-hub-signature-256")).toBe(200);
    expect(await deliver(env, `${OLD.slice(0, -1)}x`)).toBe(401);
    expect(await deliver(env, `${TEST_SECRETS.WEBHOOK_SECRET}x`)).toBe(401);
  });

  it("once the previous secret is unset, a delivery signed with it is refused", async () => {
    expect(await deliver(base, OLD)).toBe(401);
    expect(await deliver(base, TEST_SECRETS.WEBHOOK_SECRET)).toBe(200);
  });
});
