// npm start hands the Worker every variable the configuration schema knows (derived from the
// schema, not from a second list), except the ones it sets itself for the stack it runs.
import { describe, expect, it } from "vitest";
import { envSchema } from "../../src/app/config-schema.ts";
import { PASSED, passedFrom, STARTS_ITS_OWN } from "../../scripts/start-vars.mjs";

describe("npm start's variables", () => {
  it("are exactly the schema's, less those it sets itself", () => {
    expect([...PASSED, ...STARTS_ITS_OWN].sort()).toEqual(Object.keys(envSchema.shape).sort());
    for (const own of STARTS_ITS_OWN) expect(Object.keys(envSchema.shape)).toContain(own);
    for (const name of [
      "NATS_GATEWAY",
      "NATS_GATEWAY_SHARDS",
      "EAGER_RECONCILE",
      "WEBHOOK_MAX_BYTES",
      "ACK_WAIT_MS",
      "RECONCILE_BUDGET_MS",
      "LEASE_TTL_MS",
      "GITEA_JOB_PAGES",
      "CLEANUP_GRACE_MS",
    ])
      expect(PASSED).toContain(name);
  });

  it("passes what is set, and nothing else: not other variables, not empty ones, not NATS's", () => {
    const user = {
      NATS_GATEWAY: "off",
      NATS_GATEWAY_SHARDS: "4",
      EAGER_RECONCILE: "false",
      WEBHOOK_MAX_BYTES: "2048",
      CAPACITY_VM: "",
      HOME: "/root",
      NATS_URL: "ws://elsewhere:1",
      NATS_TOKEN: "t",
      constructor: "x",
      __proto__: { CAPACITY_POD: "3" },
    };
    expect(passedFrom(user)).toEqual({ NATS_GATEWAY: "off", NATS_GATEWAY_SHARDS: "4", EAGER_RECONCILE: "false", WEBHOOK_MAX_BYTES: "2048" });
  });
});
