// Taking a warm runner away (scaled down above the target, or recycled after maxIdleMs) without
// ever failing a job: a runner that has just taken one is left alone. Gitea is asked first. Where
// Gitea can disable a runner (newer than 1.25), it is disabled before the question, so that it can
// take no task after the answer; on Gitea 1.25 a task handed to it between the answer and its
// deletion is the one window left (README, Known limits). The record is then ended by
// compare-and-set, which a claim that landed meanwhile makes fail.
import type { Dispatcher, State } from "../dispatcher-types.ts";
import { releaseRunner } from "../reconcile/teardown.ts";
import { placementOf } from "../state/records.ts";

const LIVE = new Set(["received", "capacity_wait", "backend_pending", "backend_ready"]);

/** True when the runner was taken away; false when it had taken a job, or was gone already. */
export async function drainWarm(d: Dispatcher, state: State, id: string, reason: "scaled_down" | "idle_recycled", pool: string): Promise<boolean> {
  const record = await state.records.get(id);
  if (!record || !LIVE.has(record.state)) return false;
  const runnerId = record.runner?.id;
  if (runnerId !== undefined && d.gitea) {
    await d.gitea.disableRunner(runnerId).catch(() => false);
    const seen = await d.gitea.getRunner(runnerId);
    if (seen?.busy) {
      d.sink.event({ event: "warm_busy", assignment: id, backend: record.backend, pool, reason: "Gitea says it runs a task: left to finish it" });
      return false;
    }
  }
  const at = new Date(d.now()).toISOString();
  const ended = await state.records.update(id, (r) => (LIVE.has(r.state) ? { ...r, state: "terminated", terminatedAt: at, reason } : undefined));
  if (ended?.state !== "terminated" || ended.reason !== reason || ended.terminatedAt !== at) return false;
  const place = placementOf(ended);
  await state.admission.release(place, id);
  await releaseRunner(d, id, place.backend, runnerId);
  d.sink.event({ event: reason === "scaled_down" ? "warm_scaled_down" : "warm_recycled", assignment: id, backend: place.backend, pool });
  return true;
}
