import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, loadProvisionConfig } from "../../src/app/config.ts";
import { desiredConsumer, FAIR_SHARE_WINDOW } from "../../src/nats/layout.ts";
import { testEnv } from "../harness/env.ts";

const good = {
  NATS_URL: "ws://127.0.0.1:1234, wss://nats.example.org",
  TRUST_DOMAIN: "example.org",
  PUBLIC_URL: "https://dispatch.example.org/",
  DISPATCH_TOKEN: "dispatch-token-0123456789",
  CLAIM_SIGNING_KEY: "claim-signing-key-0123456789abcdef0123",
  POD_BACKEND_URL: "https://pods.example.org",
  POD_BACKEND_TOKEN: "pod-token-secret",
  CAPACITY_VM: "0",
};

function problems(env: Record<string, unknown>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("configuration", () => {
  it("applies the documented defaults", () => {
    const c = loadConfig(good);
    expect(c.natsServers).toEqual(["ws://127.0.0.1:1234", "wss://nats.example.org"]);
    expect(c).toMatchObject({
      stream: "ASSIGNMENTS",
      subjectBase: "assignments",
      capacity: { pod: 10, vm: 0 },
      retryDelayMs: undefined,
      claimTimeoutMs: 240_000,
      ackWaitMs: 60_000,
      reconcileBudgetMs: 20_000,
      leaseTtlMs: 21_600_000,
      backendTimeoutMs: 10_000,
      publicUrl: "https://dispatch.example.org",
      natsAuth: { kind: "none" },
    });
    expect(c.backends).toEqual([{ backend: "pod", capacity: 10, batchSize: 10, driver: "http", url: "https://pods.example.org", token: "pod-token-secret" }]);
    expect(c.kubernetes).toBeUndefined();
  });

  it("reports every problem at once, naming each variable", () => {
    const found = problems({
      NATS_URL: "http://nats:4222",
      TRUST_DOMAIN: "Not A Domain",
      CAPACITY_POD: "-1",
      BATCH_SIZE: "many",
      DISPATCH_TOKEN: "short",
      NATS_TOKEN: "t",
      NATS_USER: "u",
    });
    for (const name of [
      "NATS_URL",
      "TRUST_DOMAIN",
      "PUBLIC_URL",
      "CAPACITY_POD",
      "BATCH_SIZE",
      "DISPATCH_TOKEN",
      "CLAIM_SIGNING_KEY",
      "NATS auth",
      "NATS_USER and NATS_PASS",
    ]) {
      expect(
        found.some((p) => p.startsWith(name)),
        `${name} in ${found.join(" | ")}`,
      ).toBe(true);
    }
  });

  it("never echoes a secret value in an error", () => {
    const secrets = { DISPATCH_TOKEN: "tiny-secret", CLAIM_SIGNING_KEY: "short-signing-secret", NATS_URL: "ws://user:hunter2@nats" };
    const text = problems({ ...good, ...secrets, NATS_TOKEN: "tok-secret", NATS_USER: "u", NATS_PASS: "pass-secret" }).join("\n");
    for (const value of ["tiny-secret", "short-signing-secret", "hunter2", "tok-secret", "pass-secret"]) expect(text).not.toContain(value);
  });

  it("requires a backend URL for every enabled backend", () => {
    expect(problems({ ...good, CAPACITY_VM: undefined })).toEqual([
      expect.stringContaining("VM_BACKEND_URL is required while CAPACITY_VM > 0 and VM_DRIVER=http"),
    ]);
  });

  it("requires AckWait to outlast a pass (budget plus 10 s), so a held delivery is not redelivered", () => {
    expect(problems({ ...good, RECONCILE_BUDGET_MS: 55_000 })).toEqual(["ACK_WAIT_MS must be at least RECONCILE_BUDGET_MS + 10000 (65000), got 60000"]);
    expect(problems({ ...good, RECONCILE_BUDGET_MS: 50_000 })).toEqual([]);
  });

  it("chooses one NATS auth method", () => {
    expect(loadConfig({ ...good, NATS_TOKEN: "abc" }).natsAuth).toEqual({ kind: "token", token: "abc" });
    expect(loadConfig({ ...good, NATS_USER: "a", NATS_PASS: "b" }).natsAuth).toEqual({ kind: "userpass", user: "a", pass: "b" });
    expect(loadConfig({ ...good, NATS_CREDS: "-----BEGIN NATS USER JWT-----" }).natsAuth.kind).toBe("creds");
  });

  it("accepts numbers given as numbers (wrangler vars) and as strings", () => {
    expect(loadConfig({ ...good, CAPACITY_POD: 3, BATCH_SIZE: "2", RETRY_DELAY_MS: 500 })).toMatchObject({
      capacity: { pod: 3 },
      retryDelayMs: 500,
      backends: [{ batchSize: 2 }],
    });
  });

  it("turns the NATS gateway on by default, with one shard and no location hint", () => {
    expect(loadConfig(good).gateway).toEqual({ enabled: true, shards: 1, location: undefined });
    expect(loadConfig({ ...good, NATS_GATEWAY: "off", NATS_GATEWAY_SHARDS: "4", NATS_GATEWAY_LOCATION: "weur" }).gateway).toEqual({
      enabled: false,
      shards: 4,
      location: "weur",
    });
    expect(loadConfig({ ...good, NATS_GATEWAY_SHARDS: 64 }).gateway.shards).toBe(64);
  });

  it("names each gateway variable given a near miss", () => {
    for (const [name, bad] of [
      ["NATS_GATEWAY", "true"],
      ["NATS_GATEWAY", "On"],
      ["NATS_GATEWAY_SHARDS", "0"],
      ["NATS_GATEWAY_SHARDS", "65"],
      ["NATS_GATEWAY_SHARDS", "1.5"],
      ["NATS_GATEWAY_LOCATION", "WEUR"],
      ["NATS_GATEWAY_LOCATION", "eu"],
      ["NATS_GATEWAY_LOCATION", "constructor"],
    ] as const) {
      const found = problems({ ...good, [name]: bad });
      expect(found, `${name}=${bad}`).toHaveLength(1);
      expect(found[0]).toMatch(new RegExp(`^${name}\\b`));
    }
  });
});

describe("npm run provision", () => {
  it.each(["on", "off"])("makes the consumers the Worker's /healthz wants (FAIR_SHARE=%s: the window follows it)", (fairShare) => {
    const env = testEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", { CAPACITY_POD: 7, FAIR_SHARE: fairShare });
    expect(desiredConsumer(loadProvisionConfig(env), "pod")).toEqual(desiredConsumer(loadConfig(env), "pod"));
    expect(desiredConsumer(loadProvisionConfig(env), "pod").max_ack_pending).toBe(fairShare === "on" ? 7 + FAIR_SHARE_WINDOW : 7);
  });
});
