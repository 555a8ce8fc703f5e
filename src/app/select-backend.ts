// Builds the driver configured for a backend (backends/drivers.ts lists them).
import type { Config } from "./config.ts";
import type { BackendConfig } from "../backends/config.ts";
import type { DriverDeps } from "../backends/driver-module.ts";
import { driverModule } from "../backends/drivers.ts";
import type { RunnerBackend } from "../domain/backend.ts";

export function createRunnerBackend(config: Config, b: BackendConfig, doFetch?: typeof fetch, more: Partial<DriverDeps> = {}): RunnerBackend {
  const module = driverModule(b.driver);
  return module.create(b, config.drivers[module.settingsKey], driverDeps(config, doFetch, more));
}

function driverDeps(config: Config, doFetch?: typeof fetch, more: Partial<DriverDeps> = {}): DriverDeps {
  return {
    fetch: doFetch,
    // The forge names the runners; either forge's RUNNER_NAME_PREFIX names every object of theirs.
    prefix: config.gitea?.runnerNamePrefix ?? config.forgejo?.runnerNamePrefix ?? "gdr",
    now: Date.now,
    instance: deploymentInstance(config.stream, config.publicUrl),
    ...more,
  };
}

/**
 * What marks this deployment's workloads where another deployment may share the place (one
 * Hetzner project): its stream's name and a hash of its public URL, as a label value.
 */
export function deploymentInstance(stream: string, publicUrl: string): string {
  let h = 0x811c9dc5;
  for (const c of new TextEncoder().encode(publicUrl)) h = Math.imul(h ^ c, 0x01000193) >>> 0;
  const name =
    stream
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "")
      .slice(0, 40) || "gdr";
  return `${name}-${h.toString(16).padStart(8, "0")}`;
}
