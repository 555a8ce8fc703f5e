// A NATS that refuses the credentials says which variables hold them, in the error, in /healthz
// and in provision's one line, and never shows a value: a wrong password, a wrong token, none at
// all. Near miss: the right ones connect.
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startNatsServer } from "../../scripts/nats-server.mjs";
import { loadConfig } from "../../src/app/config.ts";
import { checkHealth } from "../../src/http/health.ts";
import { NatsAuthRefused, openNats, closeNats } from "../../src/nats/connection.ts";
import { testEnv } from "../harness/env.ts";

const backend = inject("backendUrl");
let server: Awaited<ReturnType<typeof startNatsServer>>;
beforeAll(async () => {
  server = await startNatsServer({ extraConfig: 'authorization { users: [{ user: gdr, password: "right-pass-8f2k" }] }' });
}, 30_000);
afterAll(async () => {
  await server?.stop();
});

const configWith = (vars: Record<string, string>) => loadConfig(testEnv(server.wsUrl, backend, { NATS_TOKEN: "", NATS_USER: "", NATS_PASS: "", ...vars }));
const refusal = async (vars: Record<string, string>) => {
  const err = await openNats(configWith(vars)).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(NatsAuthRefused);
  return (err as Error).message;
};

describe("NATS refusing the credentials", () => {
  it("names NATS_USER and NATS_PASS for a wrong password, NATS_TOKEN for a wrong token, and the three ways when none is set", async () => {
    const wrong = await refusal({ NATS_USER: "gdr", NATS_PASS: "right-pass-8f2j" });
    expect(wrong).toBe("NATS refused the credentials (authorization violation): check NATS_USER and NATS_PASS");
    expect(await refusal({ NATS_TOKEN: "a-token-that-is-wrong-0000" })).toContain("check NATS_TOKEN");
    expect(await refusal({})).toContain("no credentials were given: set NATS_TOKEN, NATS_USER + NATS_PASS, or NATS_CREDS");
    // Near miss: the right password connects.
    const handle = await openNats(configWith({ NATS_USER: "gdr", NATS_PASS: "right-pass-8f2k" }));
    await closeNats(handle.nc);
  });

  it("/healthz answers 503 naming the variables and the server, never the value", async () => {
    const { status, body } = await checkHealth(configWith({ NATS_USER: "gdr", NATS_PASS: "right-pass-8f2j" }), false);
    expect(status).toBe(503);
    expect(body.problems).toEqual([
      expect.stringMatching(/^NATS refused the credentials .*check NATS_USER and NATS_PASS \(NATS at ws:\/\/127\.0\.0\.1:\d+\)$/),
    ]);
    expect(JSON.stringify(body)).not.toContain("right-pass");
  });

  it("provision says it in one line", () => {
    const run = spawnSync(process.execPath, ["scripts/provision.mjs"], {
      encoding: "utf8",
      env: { ...process.env, DEV_VARS: "/nonexistent", NATS_URL: server.wsUrl, TRUST_DOMAIN: "t.local", NATS_USER: "gdr", NATS_PASS: "right-pass-8f2j" },
    });
    expect(run.status).toBe(1);
    expect(run.stderr.trim()).toBe("provision failed: NATS refused the credentials (authorization violation): check NATS_USER and NATS_PASS");
  });
});
