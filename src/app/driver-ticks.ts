// The drivers' own work on the cron tick (the hetzner driver's orphan sweep), once per backend
// whose driver has some, on the invocation's driver (its rate budget is the one the pass spends).
// The sweeps share a part of the tick's budget, and each of their calls has its own bound, so that
// a long list judged late still deletes what it can. A sweep that fails is logged and retried at
// the next tick: it deletes nothing it has not read in full.
import type { Config } from "./config.ts";
import type { TickAsk } from "../domain/backend.ts";
import { TERMINAL } from "../model/states.ts";
import type { Dispatcher } from "../domain/context.ts";
import { interruptAssignment } from "../domain/interrupt.ts";
import { placementOf } from "../backends/refused-field.ts";

/** Of the tick's budget (RECONCILE_BUDGET_MS), what the drivers' sweeps may take: the reconcile pass has the rest. */
export const SWEEP_SHARE = 0.5;

export async function tickDrivers(d: Dispatcher, config: Config, now: () => number = Date.now): Promise<void> {
  const lifetimes = new Map(config.pools.map((p) => [p.name, p.maxLifetimeMs]));
  const deadline = now() + Math.max(config.backendTimeoutMs, config.reconcileBudgetMs * SWEEP_SHARE);
  for (const b of config.backends) {
    const runner = d.runnersFor(b.backend);
    if (!runner.tick) continue;
    try {
      const signal = AbortSignal.timeout(Math.max(0, deadline - now()));
      const ask: TickAsk = {
        lifetimes,
        pools: config.pools.filter((p) => p.backend === b.backend).map(placementOf),
        signal,
        deadline,
        call: (fn) => d.callBackend(fn),
        records: (ids) =>
          d.withState(async (s) => {
            const found = await s.records.getMany(ids);
            return new Map([...found].map(([id, r]) => [id, { ended: TERMINAL.has(r.value.state) }]));
          }),
        event: (event, fields) => d.sink.event({ event, backend: b.backend, ...fields }),
        interrupted: async (id, notice) => void (await interruptAssignment(d, id, { notice, by: "sweep" })),
      };
      await runner.tick(ask);
    } catch (err) {
      d.sink.error("a driver's tick failed; nothing was deleted that was not read in full", { backend: b.backend, reason: (err as Error).message });
    }
  }
}
