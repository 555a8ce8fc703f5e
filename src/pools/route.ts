// Which pools can run a job: Gitea's rule (every runs-on label of the job is among the runner's
// label names), lowest priority number first, configuration order among equals. The caller tries
// them in turn and spills to the next when one is at its cap.
import { labelName } from "../forge/gitea/routes.ts";

export function poolsFor<P extends { labels: readonly string[]; priority: number }>(pools: readonly P[], runsOn: readonly string[]): P[] {
  if (!runsOn.length) return [];
  return pools
    .map((pool, order) => ({ pool, order }))
    .filter(({ pool }) => {
      const names = new Set(pool.labels.map(labelName));
      return runsOn.every((label) => names.has(label));
    })
    .sort((a, b) => a.pool.priority - b.pool.priority || a.order - b.order)
    .map(({ pool }) => pool);
}
