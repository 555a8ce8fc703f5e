// Every credential check, and that a refused request changes nothing.
import { describe, expect, inject, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS, testClaimToken } from "../harness/env.ts";
import { streamState } from "../harness/nats.ts";
import { claimTokenOf, bearer, captureLogs, request } from "../harness/worker.ts";
import { queuedFixture } from "../harness/fixtures.ts";

describe("authz", () => {
  it("refuses wrong, missing and borrowed credentials; state is unchanged", async () => {
    const logs = captureLogs();
    try {
      const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"));
      await provisionEnv(env);
      const raw = JSON.stringify(queuedFixture);
      const sig = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
      const hook = (body: string, signature: string) =>
        request(env, "/v1/gitea/webhook", {
          method: "POST",
          headers: { "content-type": "application/json", "x-gitea-event-type": "workflow_job", "x-gitea-signature": signature },
          body,
        });
      expect((await hook(raw, sig)).status).toBe(202);
      const view = async () =>
        (await (await request(env, "/v1/assignments/gitea-1187-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as Record<string, unknown>;
      const before = await view();
      const messages = (await streamState(env)).messages;

      // A replayed delivery with a changed body keeps the old signature: refused.
      const tampered = raw.replace('"id": 1187', '"id": 1188').replace('"id":1187', '"id":1188');
      expect(tampered).not.toBe(raw);
      expect((await hook(tampered, sig)).status).toBe(401);

      const post = (token?: string) =>
        request(env, "/v1/assignments", {
          method: "POST",
          headers: { ...(token ? bearer(token) : {}), "content-type": "application/json" },
          body: JSON.stringify({ version: 1, id: "x-1", backend: "pod", labels: ["a"] }),
        });
      expect((await post()).status).toBe(401);
      expect((await post("wrong-dispatch-token-0000")).status).toBe(401);
      expect((await post(`${TEST_SECRETS.DISPATCH_TOKEN}x`)).status).toBe(401);
      expect((await request(env, "/v1/assignments/gitea-1187-1", { headers: bearer("nope") })).status).toBe(401);

      const claim = (token?: string) => request(env, "/v1/assignments/gitea-1187-1/claim", { method: "POST", headers: token ? bearer(token) : {} });
      const complete = (token?: string) => request(env, "/v1/assignments/gitea-1187-1/complete", { method: "POST", headers: token ? bearer(token) : {} });
      expect((await claim()).status).toBe(401);
      expect((await claim("garbage")).status).toBe(403);
      expect((await claim(await testClaimToken("gitea-9999-1", new Date().toISOString()))).status).toBe(403);
      expect((await claim(await claimTokenOf(env, "gitea-1187-1", "another-signing-key-0000000000000000"))).status).toBe(403);
      expect((await claim(TEST_SECRETS.DISPATCH_TOKEN)).status).toBe(403);
      expect((await complete(await testClaimToken("gitea-9999-1", new Date().toISOString()))).status).toBe(403);
      // The right token one character off, or with more after it: compared whole, not on a prefix.
      const right = await claimTokenOf(env, "gitea-1187-1");
      const lastChanged = right.slice(0, -1) + (right.endsWith("A") ? "B" : "A");
      for (const near of [lastChanged, `${right}A`, `${right}${right}`, right.slice(0, -1)]) {
        expect((await claim(near)).status).toBe(403);
        expect((await complete(near)).status).toBe(403);
      }

      const after = await view();
      expect({ ...after, updatedAt: 0 }).toEqual({ ...before, updatedAt: 0 });
      expect(after.state).not.toBe("claimed");
      expect((await streamState(env)).messages).toBe(messages);
      expect((await request(env, "/v1/assignments/gitea-1188-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).status).toBe(404);
    } finally {
      logs.restore();
    }
  });
});
