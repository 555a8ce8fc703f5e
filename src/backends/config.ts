// Which driver serves each backend, and its settings. Part of loadConfig; kept apart so that the
// driver rules live next to the drivers (drivers.ts lists them, each reads its own settings).
import type { BackendConfig, BackendEnv, DriverEnv } from "./driver-module.ts";
import { DRIVER_MODULES, driverModule, type DriverName } from "./drivers.ts";
import { driverVariable, type KubernetesConfig } from "./kubernetes/settings.ts";

export type { BackendConfig, BackendEnv, KubernetesConfig, DriverName };
export { DRIVERS } from "./drivers.ts";
export { DEFAULT_RUNNER_IMAGE } from "./kubernetes/settings.ts";

/** Each driver's shared settings, by its settingsKey. */
export type DriverSettings = Record<string, unknown>;

const TEMPLATE_VARIABLES = ["POD_TEMPLATE", "VM_TEMPLATE"] as const;

export function parseBackends(
  entries: BackendEnv[],
  env: DriverEnv,
  hasForge: boolean,
  problems: string[],
): { backends: BackendConfig[]; drivers: DriverSettings; kubernetes: KubernetesConfig | undefined } {
  const backends: BackendConfig[] = entries
    .filter((b) => b.capacity > 0)
    .map((b) => ({
      backend: b.backend,
      capacity: b.capacity,
      batchSize: b.batchSize ?? b.capacity,
      driver: b.driver,
      ...(b.driver === "http" ? { url: b.url, token: b.token } : {}),
      ...(b.template ? { template: b.template } : {}),
      ...(b.named !== undefined ? { named: b.named } : {}),
      ...(driverModule(b.driver).replacesOnInterrupt ? { interruptible: true as const } : {}),
    }));
  for (const b of backends)
    if (driverModule(b.driver).needsForge && !hasForge)
      problems.push(`${driverVariable(b)} needs the Gitea integration (GITEA_URL): runners start from a registered identity`);
  // A template is refused when invalid, and when no backend would read it: never silently dropped.
  const templates = Object.fromEntries(TEMPLATE_VARIABLES.map((name) => [name, parseTemplate(name, env[name], backends, problems)]));
  const drivers: DriverSettings = {};
  for (const key of new Set(backends.map((b) => driverModule(b.driver).settingsKey))) {
    const using = backends.filter((b) => driverModule(b.driver).settingsKey === key);
    const settings = driverModule(using[0]!.driver).load({ ...env, ...templates }, using, problems);
    if (settings !== undefined) drivers[key] = settings;
  }
  for (const b of backends) {
    const module = driverModule(b.driver);
    const settings = drivers[module.settingsKey];
    if (settings === undefined) continue;
    const variable = b.template ? `BACKENDS' template of backend ${b.backend}` : (module.templateVariable ?? "");
    module.checkBackend?.(settings, b, variable, problems);
  }
  return { backends, drivers, kubernetes: drivers.kubernetes as KubernetesConfig | undefined };
}

function parseTemplate(name: (typeof TEMPLATE_VARIABLES)[number], text: unknown, backends: BackendConfig[], problems: string[]): unknown {
  if (typeof text !== "string" || !text) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    const bodies = {
      POD_TEMPLATE: "a partial Pod",
      VM_TEMPLATE: "a partial VirtualMachineInstance, a partial Hetzner create-server body, or a partial EC2 RunInstances request",
    };
    problems.push(`${name} must be a JSON object (${bodies[name]})`);
    return undefined;
  }
  const readers = new Set(backends.filter((b) => !b.template && driverModule(b.driver).templateVariable === name).map((b) => b.driver));
  if (!readers.size) {
    const drivers = Object.entries(DRIVER_MODULES).flatMap(([d, m]) => ("templateVariable" in m && m.templateVariable === name ? [d] : []));
    problems.push(
      `${name} is set, but no enabled backend uses the ${drivers.length > 1 ? `${drivers.slice(0, -1).join(", ")} or ${drivers.at(-1)}` : drivers[0]} driver (POD_DRIVER or VM_DRIVER) without a template of its own, so it would be ignored: unset it`,
    );
  } else if (readers.size > 1)
    problems.push(
      `${name} is read by backends of the ${[...readers].join(" and ")} drivers, which take different bodies: give the named backends their own template`,
    );
  return value;
}
