// Which pools can run a job: Gitea's rule (every runs-on label of the job is among the runner's
// label names), lowest priority number first, configuration order among equals. The caller tries
// them in turn and spills to the next when one is at its cap.
import { MAX_POOLS_PER_JOB, type AssignmentRequest } from "../model/assignment.ts";
import { labelName } from "./routes.ts";

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

/**
 * Where a job's assignment waits and may run: its first pool's backend and labels, and every pool
 * that can run it in the order they are tried; undefined when none can. Both forges' requests
 * start from this.
 */
export function routeJob<P extends { name: string; backend: AssignmentRequest["backend"]; labels: readonly string[]; priority: number }>(
  pools: readonly P[],
  runsOn: readonly string[],
): Pick<AssignmentRequest, "backend" | "labels" | "pools"> | undefined {
  const candidates = poolsFor(pools, runsOn).slice(0, MAX_POOLS_PER_JOB);
  const first = candidates[0];
  if (!first) return undefined;
  return { backend: first.backend, labels: [...first.labels], pools: candidates.map((p) => p.name) };
}
