// The drivers' own work on the cron tick (the hetzner driver's orphan sweep), once per backend
// whose driver has some, each within the backend call limits. A sweep that fails is logged and
// retried at the next tick: it deletes nothing it has not read in full.
import type { Config } from "./config.ts";
import type { DriverDeps, TickAsk } from "../backends/driver-module.ts";
import { driverModule } from "../backends/drivers.ts";
import { TERMINAL } from "../model/states.ts";
import type { Dispatcher } from "../domain/context.ts";
import { driverDeps } from "./select-backend.ts";

export async function tickDrivers(d: Dispatcher, config: Config, more: Partial<DriverDeps>): Promise<void> {
  const lifetimes = new Map(config.pools.map((p) => [p.name, p.maxLifetimeMs]));
  for (const b of config.backends) {
    const module = driverModule(b.driver);
    const settings = config.drivers[module.settingsKey];
    if (!module.tick || settings === undefined) continue;
    try {
      await d.callBackend(async (signal) => {
        const ask: TickAsk = {
          lifetimes,
          signal,
          records: (ids) =>
            d.withState(async (s) => {
              const found = await s.records.getMany(ids);
              return new Map([...found].map(([id, r]) => [id, { ended: TERMINAL.has(r.value.state) }]));
            }),
          event: (event, fields) => d.sink.event({ event, backend: b.backend, ...fields }),
        };
        return module.tick!(b, settings, driverDeps(config, more.fetch, { now: d.now, ...more }), ask);
      });
    } catch (err) {
      d.sink.error("a driver's tick failed; nothing was deleted that was not read in full", { backend: b.backend, reason: (err as Error).message });
    }
  }
}
