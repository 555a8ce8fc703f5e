// Rotating the four secrets with a runner in flight (docs/deploy.md, "Rotating secrets"): while a
// *_PREVIOUS secret is set, what was signed or sealed under the old one still works (the runner's
// claim token, its sealed identity, the old dispatch token, a webhook signed by a Gitea not yet
// updated), new things use the new one only, and once the previous secret is removed the old one
// is refused. Near misses (a token one character off) are refused throughout.
import { describe, expect, inject, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { base64 } from "../../src/model/crypto.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { queuedFixture } from "../harness/fixtures.ts";
import { backendControl, bearer, claimTokenOf, request, tickUntil } from "../harness/worker.ts";

const NEW = {
  DISPATCH_TOKEN: "rotated-dispatch-token-0002",
  CLAIM_SIGNING_KEY: "rotated-claim-signing-key-000000000002",
  GITEA_WEBHOOK_SECRET: "rotated-webhook-secret-0002",
  RUNNER_IDENTITY_KEY: base64(new Uint8Array(32).map((_, i) => 100 + i)),
};
const PREVIOUS = {
  DISPATCH_TOKEN_PREVIOUS: TEST_SECRETS.DISPATCH_TOKEN,
  CLAIM_SIGNING_KEY_PREVIOUS: TEST_SECRETS.CLAIM_SIGNING_KEY,
  GITEA_WEBHOOK_SECRET_PREVIOUS: TEST_SECRETS.WEBHOOK_SECRET,
  RUNNER_IDENTITY_KEY_PREVIOUS: TEST_SECRETS.RUNNER_IDENTITY_KEY,
};
const offByOne = (t: string) => t.slice(0, -1) + (t.endsWith("A") ? "B" : "A");

describe("secret rotation", () => {
  it("a runner in flight survives the rotation of every secret; the old ones stop working once their previous is removed", async () => {
    const old = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), { RETRY_DELAY_MS: 50 });
    await provisionEnv(old);
    const backend = backendControl(old);
    const rawA = JSON.stringify(queuedFixture);
    const rawB = rawA.replace('"id": 1187', '"id": 1188').replace('"id":1187', '"id":1188');
    expect(rawB).not.toBe(rawA);
    const hook = async (env: Record<string, string>, secret: string, raw = rawA) =>
      request(env, "/v1/gitea/webhook", {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-gitea-event-type": "workflow_job",
          "x-gitea-signature": await giteaSignature(secret, new TextEncoder().encode(raw)),
        },
        body: raw,
      });
    const runnerOf = async (id: string) => (await backend.state()).runners.find((r) => r.id === id);
    // Job A's runner is up before the rotation, holding a claim token signed under the old key.
    expect((await hook(old, TEST_SECRETS.WEBHOOK_SECRET)).status).toBe(202);
    await tickUntil(old, async () => (await runnerOf("gitea-1187-1")) !== undefined, { timeoutMs: 20_000 });
    const oldClaimToken = (await runnerOf("gitea-1187-1"))!.claimToken;
    expect(oldClaimToken).toBe(await claimTokenOf(old, "gitea-1187-1"));
    // Job B's runner is registered and its identity sealed under the old key, but the backend refuses it for now.
    await backend.mode({ failRate: 1 });
    expect((await hook(old, TEST_SECRETS.WEBHOOK_SECRET, rawB)).status).toBe(202);
    await tickUntil(old, async () => (await backend.state()).requests.some((r) => r.method === "PUT" && r.path.includes("gitea-1188-1")), {
      timeoutMs: 20_000,
    });
    expect(await runnerOf("gitea-1188-1")).toBeUndefined();
    await backend.mode({ failRate: 0 });

    // Rotated: the new secrets, the old ones as *_PREVIOUS.
    const rotating = { ...old, ...NEW, ...PREVIOUS };
    // B's sealed identity opens under the previous key: the backend gets its runner.
    await tickUntil(rotating, async () => (await runnerOf("gitea-1188-1")) !== undefined, { timeoutMs: 20_000 });
    const id = "gitea-1187-1";
    for (const token of [TEST_SECRETS.DISPATCH_TOKEN, NEW.DISPATCH_TOKEN])
      expect((await request(rotating, `/v1/assignments/${id}`, { headers: bearer(token) })).status).toBe(200);
    for (const near of [offByOne(TEST_SECRETS.DISPATCH_TOKEN), offByOne(NEW.DISPATCH_TOKEN)])
      expect((await request(rotating, `/v1/assignments/${id}`, { headers: bearer(near) })).status).toBe(401);
    // Gitea, not yet given the new secret, still delivers: a duplicate, not a 401.
    expect((await hook(rotating, TEST_SECRETS.WEBHOOK_SECRET)).status).toBe(202);
    expect((await hook(rotating, NEW.GITEA_WEBHOOK_SECRET)).status).toBe(202);
    expect((await hook(rotating, offByOne(NEW.GITEA_WEBHOOK_SECRET))).status).toBe(401);
    // The runner in flight claims with the token it was handed before the rotation.
    const claim = (env: Record<string, string>, token: string, which = id) =>
      request(env, `/v1/assignments/${which}/claim`, { method: "POST", headers: bearer(token) });
    expect((await claim(rotating, offByOne(oldClaimToken))).status).toBe(403);
    expect((await claim(rotating, oldClaimToken)).status).toBe(200);
    // B's runner was handed a token under the new key alone: it claims once the previous key is gone.
    const tokenB = (await runnerOf("gitea-1188-1"))!.claimToken;
    expect(tokenB).toBe(await claimTokenOf(rotating, "gitea-1188-1", NEW.CLAIM_SIGNING_KEY));
    expect((await claim({ ...old, ...NEW }, tokenB, "gitea-1188-1")).status).toBe(200);

    // The rotation finished: the previous secrets removed, the old ones refused.
    const rotated = { ...old, ...NEW };
    expect((await request(rotated, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).status).toBe(401);
    expect((await request(rotated, `/v1/assignments/${id}`, { headers: bearer(NEW.DISPATCH_TOKEN) })).status).toBe(200);
    expect((await hook(rotated, TEST_SECRETS.WEBHOOK_SECRET)).status).toBe(401);
    expect((await claim(rotated, oldClaimToken)).status).toBe(403);
    expect((await claim(rotated, tokenB, "gitea-1188-1")).status).toBe(200);
  }, 60_000);

  it("a malformed previous key is refused at load, naming it", async () => {
    const env = {
      ...giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl")),
      RUNNER_IDENTITY_KEY_PREVIOUS: "short",
      CLAIM_SIGNING_KEY_PREVIOUS: "short",
    };
    const res = await request(env, "/healthz");
    expect(res.status).toBe(503);
    const { problems } = (await res.json()) as { problems: string[] };
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringContaining("CLAIM_SIGNING_KEY_PREVIOUS must be at least 32 characters"),
        expect.stringContaining("RUNNER_IDENTITY_KEY_PREVIOUS must be the base64 of 32 random bytes"),
      ]),
    );
    expect(JSON.stringify(problems)).not.toContain("short");
  });
});
