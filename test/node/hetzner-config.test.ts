// The hetzner driver's configuration, checked at load with every problem named by its variable:
// the token, the API URL, the runner download, VM_TEMPLATE and each pool's template and candidates
// against Hetzner's API description, and candidates only where a hetzner backend reads them.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { configProblems, giteaTestEnv } from "../harness/env.ts";

const base = (extra: Record<string, unknown> = {}) =>
  giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:2", {
    CAPACITY_POD: 0,
    CAPACITY_VM: 3,
    VM_DRIVER: "hetzner",
    HCLOUD_TOKEN: "hcloud-token",
    VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22" }),
    RUNS_ON_ROUTES: JSON.stringify([{ backend: "vm", labels: ["ubuntu-latest"] }]),
    ...extra,
  });
const without = (env: Record<string, string>, key: string) => Object.fromEntries(Object.entries(env).filter(([k]) => k !== key));
const pools = (list: unknown[]): Record<string, string> => {
  const { RUNS_ON_ROUTES: _r, ...env } = base();
  return { ...env, RUNNER_POOLS: JSON.stringify(list) };
};

describe("hetzner configuration", () => {
  it("loads with a token and a template; the API URL defaults to Hetzner's", () => {
    const c = loadConfig(base());
    expect(c.drivers.hetzner).toMatchObject({ url: "https://api.hetzner.cloud/v1", token: "hcloud-token", download: undefined });
    expect(loadConfig(base({ HCLOUD_API_URL: "http://127.0.0.1:9/p/" })).drivers.hetzner).toMatchObject({ url: "http://127.0.0.1:9/p" });
  });

  it("names what is missing or wrong, all at once", () => {
    expect(configProblems(without(base(), "HCLOUD_TOKEN"))).toEqual([expect.stringMatching(/^HCLOUD_TOKEN is required with the hetzner driver/)]);
    expect(configProblems(without(base(), "VM_TEMPLATE"))).toEqual([expect.stringMatching(/^VM_TEMPLATE is required with the hetzner driver \(vm backend\)/)]);
    expect(configProblems(base({ VM_TEMPLATE: JSON.stringify({ server_type: "cx22" }) }))).toEqual([
      "VM_TEMPLATE: image is required: set it in the template or the pool's candidates (vm backend)",
    ]);
    expect(configProblems(base({ VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", user_data: "x" }) }))).toEqual([
      'VM_TEMPLATE["user_data"] is set by the dispatcher, not by a template (vm backend)',
    ]);
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "https://dl.gitea.com/act_runner" }))).toEqual([
      "HCLOUD_RUNNER_URL and HCLOUD_RUNNER_SHA256 go together: the download is run only once its sha256 matches",
    ]);
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "http://x.example.org/a", HCLOUD_RUNNER_SHA256: "a".repeat(63) }))).toEqual([
      "HCLOUD_RUNNER_URL must be an https URL (the runner program a stock image downloads)",
      "HCLOUD_RUNNER_SHA256 must be 64 hex digits (sha256sum of the runner program)",
    ]);
    // The examples' placeholders: a reserved host, one digit 64 times (every server would boot and never run a job).
    const real = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "https://gitea.example.org/r", HCLOUD_RUNNER_SHA256: "0".repeat(64) }))).toEqual([
      "HCLOUD_RUNNER_URL points at gitea.example.org, a placeholder: set the runner program's real download URL (a release asset of gitea/runner, say)",
      "HCLOUD_RUNNER_SHA256 is a placeholder (one digit 64 times): set the sha256sum of the file at HCLOUD_RUNNER_URL, or every server boots and never runs a job",
    ]);
    // Near misses: both real, in capitals too; a host that only ends like a reserved one.
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "https://dl.gitea.com/runner/r", HCLOUD_RUNNER_SHA256: real.toUpperCase() }))).toEqual([]);
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "https://myexample.org/r", HCLOUD_RUNNER_SHA256: real }))).toEqual([]);
    expect(configProblems(base({ HCLOUD_RUNNER_URL: "https://dl.gitea.com/r", HCLOUD_RUNNER_SHA256: `${"0".repeat(63)}1` }))).toEqual([]);
  });

  it("the ec2 driver refuses the same placeholders for EC2_RUNNER_URL and EC2_RUNNER_SHA256 (runner-download.ts)", () => {
    const { HCLOUD_TOKEN: _t, ...rest } = base({
      VM_DRIVER: "ec2",
      EC2_REGION: "eu-central-1",
      AWS_ACCESS_KEY_ID: "AKIAEXAMPLE0000000000",
      AWS_SECRET_ACCESS_KEY: "secret-key-0000000000000000000000000000000",
      VM_TEMPLATE: JSON.stringify({ ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large" }),
    });
    expect(configProblems({ ...rest, EC2_RUNNER_URL: "https://www.example.com/r", EC2_RUNNER_SHA256: "f".repeat(64) })).toEqual([
      "EC2_RUNNER_URL points at www.example.com, a placeholder: set the runner program's real download URL (a release asset of gitea/runner, say)",
      "EC2_RUNNER_SHA256 is a placeholder (one digit 64 times): set the sha256sum of the file at EC2_RUNNER_URL, or every server boots and never runs a job",
    ]);
    expect(configProblems({ ...rest, EC2_RUNNER_URL: "https://dl.gitea.com/r", EC2_RUNNER_SHA256: "e".repeat(63) + "f" })).toEqual([]);
  });

  it("checks each pool's template and candidates as bodies Hetzner would take; candidates only on a hetzner backend", () => {
    const pool = { name: "large", backend: "vm", labels: ["large"] };
    expect(configProblems(pools([{ ...pool, candidates: [{ server_type: "cx42", location: "nbg1" }] }]))).toEqual([]);
    // Near misses: another driver's fields, one left out, one more (named like a prototype's).
    for (const candidate of [
      { InstanceType: "m7i.large", SubnetId: "subnet-1" },
      { server_type: "cx42" },
      { server_type: "cx42", location: "nbg1", constructor: "x" },
    ])
      expect(configProblems(pools([{ ...pool, candidates: [candidate] }]))).toEqual([
        'RUNNER_POOLS[0]["candidates"][0] must have exactly server_type and location (pool "large")',
      ]);
    expect(configProblems(pools([{ ...pool, template: { labels: { size: "-large" } } }]))[0]).toMatch(
      /^RUNNER_POOLS\[0\]\["template"\]: labels\.size must match .* \(pool "large"\)$/,
    );
    expect(configProblems(pools([{ ...pool, template: { name: "mine" } }]))).toEqual([
      'RUNNER_POOLS[0]["template"]["name"] is set by the dispatcher, not by a template (pool "large")',
    ]);
    const { VM_DRIVER: _d, ...httpVm } = pools([{ ...pool, candidates: [{ server_type: "cx42", location: "nbg1" }] }]);
    expect(configProblems({ ...without(httpVm, "VM_TEMPLATE"), VM_BACKEND_URL: "http://127.0.0.1:9" })).toEqual([
      'RUNNER_POOLS[0]["candidates"] is for pools of the hetzner and ec2 drivers; backend vm uses http (pool "large")',
    ]);
    // reuse: "rebuild" alike; on hetzner it loads, and any other value is named.
    expect(configProblems(pools([{ ...pool, reuse: "rebuild" }]))).toEqual([]);
    expect(configProblems(pools([{ ...pool, reuse: "keep" }]))).toEqual(['RUNNER_POOLS[0]["reuse"] must be "rebuild" (pool "large")']);
    const { VM_DRIVER: _e, ...httpReuse } = pools([{ ...pool, reuse: "rebuild" }]);
    expect(configProblems({ ...without(httpReuse, "VM_TEMPLATE"), VM_BACKEND_URL: "http://127.0.0.1:9" })).toEqual([
      'RUNNER_POOLS[0]["reuse"] is for pools of the hetzner driver; backend vm uses http (pool "large")',
    ]);
  });
});
