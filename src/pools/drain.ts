// Taking a warm runner away (scaled down above the target, or recycled after maxIdleMs) without
// ever failing a job: a runner that has just taken one is left alone. Gitea is asked first. Where
// Gitea can disable a runner (newer than 1.25), it is disabled before the question, so that it can
// take no task after the answer; on Gitea 1.25 a task handed to it between the answer and its
// deletion is the one window left (docs/known-limits.md). The record is then ended by
// compare-and-set, which a claim that landed meanwhile makes fail.
import type { BackendAccess, Basics, ForgeAccess, State, StoreAccess } from "../domain/context.ts";
import { placementOf, runnerAt } from "../state/records.ts";
import { endRunner, WAITING } from "./end.ts";
import type { DrainReason } from "./warm-plan.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records">;

/** True when the runner was taken away; false when it had taken a job, or was gone already. */
export async function drainWarm(d: Deps, state: Stores, id: string, reason: DrainReason, pool: string): Promise<boolean> {
  const record = await state.records.get(id);
  if (!record || !WAITING.has(record.state)) return false;
  const runner = runnerAt(record);
  const directory = d.forge?.runners;
  if (runner && directory) {
    await directory.disable(runner).catch(() => false);
    const seen = await directory.get(runner);
    if (seen?.busy) {
      d.sink.event({ event: "warm_busy", assignment: id, backend: record.backend, pool, reason: "Gitea says it runs a task: left to finish it" });
      return false;
    }
  }
  const ended = await endRunner(d, state, id, reason, (r) => WAITING.has(r.state));
  if (!ended) return false;
  const event = { scaled_down: "warm_scaled_down", idle_recycled: "warm_recycled", boot_stalled: "warm_boot_stalled", hour_end: "warm_hour_end" } as const;
  d.sink.event({ event: event[reason], assignment: id, backend: placementOf(ended).backend, pool });
  return true;
}
