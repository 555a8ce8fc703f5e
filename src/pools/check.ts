// What RUNNER_POOLS must agree with in the rest of the configuration: each pool's backend is
// enabled and has room for its warm runners, and what its driver would make with its template
// (and its candidates) is what the real API accepts: otherwise it would be refused at the first job.
import type { BackendConfig, DriverSettings } from "../backends/config.ts";
import { POOL_DRIVER_FIELDS } from "../backends/driver-module.ts";
import { DRIVERS, driverModule } from "../backends/drivers.ts";
import type { Pool } from "./config.ts";
import { whyDisabled } from "../model/states.ts";

export function checkPools(pools: readonly Pool[], variable: string, backends: readonly BackendConfig[], drivers: DriverSettings, problems: string[]): void {
  pools.forEach((pool, i) => {
    const at = (field: string) => `${variable}[${i}][${JSON.stringify(field)}]`;
    const named = ` (pool ${JSON.stringify(pool.name)})`;
    const b = backends.find((c) => c.backend === pool.backend);
    if (!b) {
      problems.push(`${at("backend")} is ${pool.backend}, which is disabled (${whyDisabled(pool.backend)})${named}`);
      return;
    }
    const mostIdle = Math.max(pool.minIdle, ...(pool.schedule ?? []).map((w) => w.minIdle));
    if (mostIdle > b.capacity)
      problems.push(`${at("minIdle")} asks for ${mostIdle} warm runners, more than CAPACITY_${pool.backend.toUpperCase()} (${b.capacity})${named}`);
    const module = driverModule(b.driver);
    for (const field of POOL_DRIVER_FIELDS) {
      if (pool[field] === undefined || module.poolFields?.includes(field)) continue;
      const readers = DRIVERS.filter((d) => driverModule(d).poolFields?.includes(field));
      const whose = `the ${readers.join(" and ")} driver${readers.length > 1 ? "s" : ""}`;
      problems.push(`${at(field)} is for pools of ${whose}; backend ${b.backend} uses ${b.driver}${named}`);
    }
    const settings = drivers[module.settingsKey];
    // Without its settings, the driver's own problems are reported already.
    if (settings !== undefined) module.checkPool?.(settings, b, { ...pool, at }, problems);
  });
}
