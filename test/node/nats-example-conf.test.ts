// examples/nats-server.conf as the docs offer it, on a 3-node cluster: its account's JetStream
// limits (max_mem 0: no memory streams) take the layout at JETSTREAM_REPLICAS=3, and an account
// whose limits are too small is refused by a message that names the setting, creating nothing.
// The example's `accounts` block is taken as written; only its bcrypt hashes become passwords.
import { readFileSync } from "node:fs";
import { jetstreamManager } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startNatsCluster } from "../../scripts/nats-cluster.mjs";
import { loadConfig } from "../../src/app/config.ts";
import { withNats } from "../../src/nats/connection.ts";
import { provision, ReplicasUnavailable } from "../../src/nats/layout.ts";
import { testEnv } from "../harness/env.ts";

const backend = inject("backendUrl");
let cluster: Awaited<ReturnType<typeof startNatsCluster>>;

/** The example's accounts, its hashes as plain passwords, and two of the test's own: one the harness's readiness check uses, one with too little room. */
function accountsOfTheExample(): string {
  const example = readFileSync("examples/nats-server.conf", "utf8");
  const block = /\naccounts \{\n[\s\S]*?\n\}\n/.exec(example)?.[0];
  if (!block || !example.includes("system_account: SYS")) throw new Error("examples/nats-server.conf has no accounts block and system account");
  const passwords = block
    .replace(/\{ user: gdr, password: "[^"]+" \}/, '{ user: gdr, password: "gdr-pass" }')
    .replace(/password: "\$2a\$[^"]+"/, 'password: "sys-pass"');
  expect(passwords).toContain("max_mem: 0");
  const extra = `  READY: { jetstream: enabled, users: [{ user: ready, password: ready }] }
  TINY: { jetstream: { max_file: 1KB, max_mem: 0 }, users: [{ user: tiny, password: tiny-pass }] }
}
`;
  return `${passwords.replace(/\n\}\n$/, `\n${extra}`)}system_account: SYS\nno_auth_user: ready\n`;
}

beforeAll(async () => {
  cluster = await startNatsCluster({ size: 3, extraConfig: accountsOfTheExample() });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

const configAs = (user: string, pass: string) =>
  loadConfig(testEnv(cluster.natsUrl, backend, { JETSTREAM_REPLICAS: "3", NATS_USER: user, NATS_PASS: pass, NATS_TOKEN: "" }));

describe("examples/nats-server.conf", () => {
  it("takes the whole layout at JETSTREAM_REPLICAS=3 in its own account (max_mem 0)", async () => {
    const config = configAs("gdr", "gdr-pass");
    const done = await withNats(config, (h) => provision(h, config));
    expect(done).toContain(`stream ${config.stream}: created (R3)`);
    await withNats(config, async (h) => {
      const info = await (await jetstreamManager(h.nc)).streams.info(config.stream);
      expect(info.config.num_replicas).toBe(3);
    });
  }, 60_000);

  it("near miss: an account too small for the layout is refused naming max_file, and nothing is created", async () => {
    const config = configAs("tiny", "tiny-pass");
    const err = await withNats(config, (h) => provision(h, config)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplicasUnavailable);
    expect((err as Error).message).toMatch(/^JETSTREAM_REPLICAS=3: the NATS account's or servers' JetStream limits refused .*max_file/);
    await withNats(config, async (h) => {
      expect((await (await jetstreamManager(h.nc)).streams.names().next()).length).toBe(0);
    });
  }, 60_000);
});
