// What `npm run provision` reads and prints (scripts/provision-config.mjs): wrangler.jsonc's vars
// (of --env NAME), then .dev.vars (.dev.vars.NAME first), then the environment, each overriding the
// one before; only the Worker's own variables from the environment; secrets named, never shown.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { describeSources, mergeLayers, provisionArgs, readLayers } from "../../scripts/provision-config.mjs";

const dir = mkdtempSync(join(tmpdir(), "gdr-provision-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const config = join(dir, "wrangler.jsonc");
writeFileSync(
  config,
  `// comments and trailing commas, as wrangler takes them
{ "name": "x", "main": "src/index.ts", "compatibility_date": "2026-11-01",
  "vars": { "CAPACITY_POD": 3, "CAPACITY_VM": 4, "FAIR_SHARE": "on", "QUOTAS": { "default": { "owner": 2 } }, },
  "env": { "production": { "vars": { "CAPACITY_POD": 30, "CAPACITY_VM": 40, "FAIR_SHARE": "off" } } } }
`,
);
writeFileSync(join(dir, ".dev.vars"), 'CAPACITY_VM=5\nNATS_TOKEN="dev-vars-token-secret"\n');
writeFileSync(join(dir, ".dev.vars.production"), "CAPACITY_VM=50\n");

const read = (env: string | undefined, processEnv: Record<string, string>) =>
  mergeLayers(readLayers({ config, env, devVars: undefined, processEnv: processEnv as unknown as NodeJS.ProcessEnv, cwd: dir }).layers) as {
    vars: Record<string, unknown>;
    from: Record<string, string>;
  };

it("each source overrides the one before: wrangler.jsonc, then .dev.vars, then the environment", () => {
  const top = read(undefined, { FAIR_SHARE: "off", PATH: "/usr/bin", HOME: "/root" });
  expect(top.vars).toMatchObject({ CAPACITY_POD: 3, CAPACITY_VM: "5", FAIR_SHARE: "off", NATS_TOKEN: "dev-vars-token-secret" });
  expect(top.from).toMatchObject({ CAPACITY_POD: "wrangler.jsonc", CAPACITY_VM: ".dev.vars", FAIR_SHARE: "the environment" });
  // Only the Worker's variables come from the environment.
  expect(top.vars).not.toHaveProperty("PATH");
  expect(top.vars).not.toHaveProperty("HOME");
});

it("--env NAME reads that environment's vars (not the top level's: wrangler does not inherit them) and .dev.vars.NAME", () => {
  const prod = read("production", {});
  expect(prod.vars).toMatchObject({ CAPACITY_POD: 30, CAPACITY_VM: "50", FAIR_SHARE: "off" });
  expect(prod.vars).not.toHaveProperty("QUOTAS");
  expect(prod.from.CAPACITY_POD).toBe("wrangler.jsonc env.production");
  expect(() => read("staging", {})).toThrow("--env staging: wrangler.jsonc defines no such environment (env.staging)");
});

it("prints each variable with its source; a secret by name only, a URL without credentials", () => {
  const lines = describeSources(read(undefined, { NATS_URL: "wss://user:hunter2@nats.example.org:443/x?token=abc", DISPATCH_TOKEN: "dispatch-secret-0000" }));
  expect(lines).toContain("  NATS_TOKEN = (secret, not shown)  (.dev.vars)");
  expect(lines).toContain("  DISPATCH_TOKEN = (secret, not shown)  (the environment)");
  expect(lines).toContain("  NATS_URL = wss://nats.example.org  (the environment)");
  expect(lines).toContain('  QUOTAS = {"default":{"owner":2}}  (wrangler.jsonc)');
  expect(lines.join("\n")).not.toMatch(/hunter2|abc|dev-vars-token-secret|dispatch-secret/);
});

it("takes --config and --env, and refuses anything else", () => {
  expect(provisionArgs(["--config", "a.jsonc", "--env", "staging"])).toEqual({ config: "a.jsonc", env: "staging", dryRun: false, help: false });
  expect(provisionArgs(["--env", "staging", "--dry-run"])).toMatchObject({ env: "staging", dryRun: true });
  expect(() => provisionArgs(["--bogus"])).toThrow();
  expect(() => provisionArgs(["staging"])).toThrow();
});
