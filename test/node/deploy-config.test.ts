// The first deployment, without deploying: one wrangler.jsonc (with an environment holding
// non-default capacities, pools and FAIR_SHARE, JSON values written as JSON) and its
// .dev.vars.production. `npm run provision -- --config F --env production` builds the layout from
// it, and `wrangler dev --config F --env production` boots the Worker with it: /healthz is 200 and
// the consumers and streams are what the file says. Provisioned from the top level instead, the
// Worker names the variable that differs and the command that fixes it.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { afterAll, describe, expect, inject, it } from "vitest";
import { freePort, startWorker } from "../../bench/lib.mjs";
import { loadProvisionConfig } from "../../src/app/config.ts";
import { withNats } from "../../src/nats/connection.ts";
import { PROVISION } from "../../src/nats/layout-inspect.ts";
import { TEST_SECRETS, uniqueName } from "../harness/env.ts";

const dir = mkdtempSync(join(tmpdir(), "gdr-deploy-"));
const workers: { stop(): void }[] = [];
afterAll(() => {
  for (const w of workers) w.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("one configuration for provisioning and the Worker", () => {
  it("provisions from wrangler.jsonc --env production, boots the Worker from the same file, and /healthz is 200", async () => {
    const port = await freePort();
    const stream = uniqueName("D");
    const pools = [
      { name: "small", backend: "pod", labels: ["ubuntu-latest:docker://node:20-bookworm"], maxRunners: 3 },
      { name: "big", backend: "pod", labels: ["big"], maxRunners: 2, minIdle: 0 },
    ];
    const config = join(dir, "wrangler.jsonc");
    const shared = {
      NATS_URL: inject("natsWsUrl"),
      TRUST_DOMAIN: "example.org",
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      ASSIGNMENT_STREAM: stream,
      ASSIGNMENT_SUBJECT_BASE: `asg.${stream.toLowerCase()}`,
      POD_BACKEND_URL: `${inject("backendUrl")}/${stream}`,
      GITEA_URL: `${inject("giteaUrl")}/${stream}`,
      CAPACITY_VM: 0,
      NATS_GATEWAY: "off",
    };
    // wrangler's vars are not inherited by an environment: each one lists its own, as here.
    const file = {
      name: "gdr-deploy-test",
      main: resolve("src/index.ts"),
      compatibility_date: "2026-11-01",
      compatibility_flags: ["nodejs_compat"],
      vars: { ...shared, CAPACITY_POD: 10, RUNS_ON_ROUTES: [{ backend: "pod", labels: ["ubuntu-latest"] }] },
      env: { production: { vars: { ...shared, CAPACITY_POD: 7, FAIR_SHARE: "off", RUNNER_POOLS: pools } } },
    };
    writeFileSync(config, `// written by deploy-config.test.ts\n${JSON.stringify(file, null, 2)}\n`);
    const secrets = {
      DISPATCH_TOKEN: TEST_SECRETS.DISPATCH_TOKEN,
      CLAIM_SIGNING_KEY: TEST_SECRETS.CLAIM_SIGNING_KEY,
      POD_BACKEND_TOKEN: TEST_SECRETS.BACKEND_TOKEN,
      GITEA_WEBHOOK_SECRET: TEST_SECRETS.WEBHOOK_SECRET,
      GITEA_API_TOKEN: "gitea-api-token-0000",
      RUNNER_IDENTITY_KEY: TEST_SECRETS.RUNNER_IDENTITY_KEY,
    };
    writeFileSync(
      join(dir, ".dev.vars.production"),
      Object.entries(secrets)
        .map(([k, v]) => `${k}="${v}"`)
        .join("\n") + "\n",
    );
    // Only the project's own variables; none of the runner's (a CI may set NATS_URL and the like).
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(NATS_|CAPACITY_|FAIR_SHARE|RUNNER_|DEV_VARS)/.test(k)));
    const provision = (...args: string[]) =>
      spawnSync(process.execPath, ["scripts/provision.mjs", "--config", config, ...args], { encoding: "utf8", env: env as unknown as NodeJS.ProcessEnv });

    // The top level first, as an operator who forgot --env would: it says the file has environments.
    const top = provision();
    expect(top.status, top.stderr).toBe(0);
    expect(top.stdout).toContain("provision: no --env given, so the top level is provisioned; this file also defines env production");
    expect(top.stdout).toContain(`CAPACITY_POD = 10  (${config})`);

    const worker = await startWorker({}, port, "wrangler", { wranglerArgs: ["--config", config, "--env", "production"] });
    workers.push(worker);
    const health = async () => {
      const res = await fetch(`${worker.url}/healthz`, { headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}` } });
      return { status: res.status, body: (await res.json()) as { ok: boolean; problems: string[]; stream?: { name: string } } };
    };
    const wrong = await health();
    expect(wrong.status).toBe(503);
    expect(wrong.body.problems).toEqual(
      expect.arrayContaining([
        `consumer pod: max_ack_pending is ${10 + 10_000}, configuration wants 7 (set by CAPACITY_POD and FAIR_SHARE: ${PROVISION})`,
        `stream ${stream}_slots_pod admits 10 runners, configuration wants 7 (set by CAPACITY_POD: ${PROVISION})`,
        `stream ${stream}_pool_small is missing (RUNNER_POOLS[0]["maxRunners"] (pool "small"): ${PROVISION})`,
      ]),
    );

    // The same file and environment as the Worker: every source named, no secret shown.
    const run = provision("--env", "production");
    expect(run.status, run.stderr).toBe(0);
    const lines = run.stdout.split("\n");
    expect(lines[0]).toBe(`provision: reading ${config} env.production, then ${join(dir, ".dev.vars.production")}, then the environment`);
    expect(lines).toContain(`  CAPACITY_POD = 7  (${config} env.production)`);
    expect(lines).toContain(`  FAIR_SHARE = off  (${config} env.production)`);
    expect(lines).toContain(`  DISPATCH_TOKEN = (secret, not shown)  (${join(dir, ".dev.vars.production")})`);
    expect(lines.some((l) => l.startsWith("  RUNNER_POOLS = [{"))).toBe(true);
    for (const v of Object.values(secrets)) expect(run.stdout + run.stderr).not.toContain(v);
    expect(lines).toContain("consumer pod: updated (max_ack_pending 10010 → 7)");

    const good = await health();
    expect(good.body.problems).toEqual([]);
    expect(good.status).toBe(200);

    // What the file says is what NATS holds.
    const cfg = loadProvisionConfig({ NATS_URL: inject("natsWsUrl") });
    await withNats(cfg, async (h) => {
      const jsm = await jetstreamManager(h.nc);
      expect((await jsm.consumers.info(stream, "pod")).config.max_ack_pending).toBe(7);
      expect((await jsm.streams.info(`${stream}_slots_pod`)).config.max_msgs).toBe(7);
      expect((await jsm.streams.info(`${stream}_pool_small`)).config.max_msgs).toBe(3);
      expect((await jsm.streams.info(`${stream}_pool_big`)).config.max_msgs).toBe(2);
      await expect(jsm.consumers.info(stream, "vm")).rejects.toThrow();
    });
  }, 120_000);
});
