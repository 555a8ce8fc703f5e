// The shipped production wrangler.jsonc examples, read as wrangler reads them (its own config
// reader, each environment) and then by the real config loader: they load without a problem once
// the secrets their closing comment lists are set, and every one of those secrets is needed or
// optional, none missing; their Durable Objects and migrations are the project's own.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";
import { loadConfig, loadProvisionConfig } from "../../src/app/config.ts";
import { configProblems } from "../harness/env.ts";
import { isSecret } from "../../scripts/provision-config.mjs";

/** `ownValues`: vars an example leaves as placeholders, refused at load until the operator sets them (here, values as an operator would). */
const EXAMPLES: { file: string; envs: (string | undefined)[]; ownValues?: Record<string, string> }[] = [
  { file: "examples/wrangler.gitea-kubernetes.jsonc", envs: [undefined, "staging"] },
  { file: "examples/wrangler.forgejo.jsonc", envs: [undefined] },
  {
    file: "examples/wrangler.gitea-hetzner.jsonc",
    envs: [undefined],
    ownValues: {
      HCLOUD_RUNNER_URL: "https://dl.gitea.com/runner/2.0.0/gitea-runner-2.0.0-linux-amd64",
      HCLOUD_RUNNER_SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    },
  },
  { file: "examples/wrangler.gitea-ec2.jsonc", envs: [undefined] },
];
const VALUES: Record<string, string> = {
  RUNNER_IDENTITY_KEY: "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
  CLAIM_SIGNING_KEY: "a-claim-signing-key-of-32-characters-x",
};
const placeholder = (name: string) => VALUES[name] ?? `${name.toLowerCase()}-placeholder-0000`;

const problems = configProblems;

/** The secrets the file's closing comment names. */
const listedSecrets = (text: string) => [...new Set([...text.slice(text.lastIndexOf("// Secrets")).matchAll(/\b[A-Z][A-Z0-9_]{3,}\b/g)].map((m) => m[0]))];

describe.each(EXAMPLES)("$file", ({ file, envs, ownValues = {} }) => {
  const text = readFileSync(file, "utf8");
  const secrets = listedSecrets(text).filter((n) => n !== "NAME");
  const project = unstable_readConfig({ config: "wrangler.jsonc" }, { hideWarnings: true });

  it.each(envs)("env %s loads through the config loader with its listed secrets, and not without them", (env) => {
    const read = unstable_readConfig({ config: file, env }, { hideWarnings: true });
    const vars = read.vars as Record<string, unknown>;
    const secretValues = Object.fromEntries(secrets.filter((s) => !/^NATS_(USER|PASS|CREDS)$/.test(s)).map((s) => [s, placeholder(s)]));
    // As shipped, only its placeholders are refused, each by name; set, nothing is.
    expect(problems({ ...vars, ...secretValues }).map((p) => p.split(" ")[0])).toEqual(Object.keys(ownValues));
    const withSecrets = { ...vars, ...secretValues, ...ownValues };
    expect(problems(withSecrets)).toEqual([]);
    // Each required secret, left out, is named: the comment lists what the loader asks for.
    for (const required of ["DISPATCH_TOKEN", "CLAIM_SIGNING_KEY", "RUNNER_IDENTITY_KEY", "GITEA_API_TOKEN"]) {
      expect(secrets).toContain(required);
      const { [required]: _left, ...without } = withSecrets;
      expect(problems(without).join("\n")).toContain(required);
    }
    for (const s of secrets) expect(isSecret(s), s).toBe(true);
    // No secret is written in the file's vars.
    expect(Object.keys(vars).filter(isSecret)).toEqual([]);
    // Provisioning reads the same file: the same capacities and pools.
    const layout = loadProvisionConfig(vars);
    const config = loadConfig(withSecrets);
    expect(layout.backends).toEqual(config.backends.map((b) => ({ backend: b.backend, capacity: b.capacity })));
    expect(layout.pools.map((p) => p.name)).toEqual(config.pools.map((p) => p.name));
    // Deployable as the project is: the same Durable Objects and migrations.
    expect(read.durable_objects.bindings).toEqual(project.durable_objects.bindings);
    expect(read.migrations).toEqual(project.migrations);
  });
});
