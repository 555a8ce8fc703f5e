// A cloud VM that boots and never fetches its launch (no way out to PUBLIC_URL, no curl or wget,
// a runner whose checksum differs) runs no job and is billed all the same: Hetzner a started hour,
// EC2 by the second until its boot timeout. Its bootstrap fetch is noted in its record
// (markLaunched, http/vm-routes.ts); a delivery that finds it missing LAUNCH_EXPECTED_MS after its
// runner was asked says so once per boot attempt (an event, and a count per pool), well before
// the pool's boot timeout ends it.
import type { AssignmentRecord } from "../state/records.ts";
import { markLaunchLate } from "../state/transitions.ts";
import type { ProcessDeps } from "./types.ts";

export type { LaunchWatch } from "./types.ts";

/** How long a VM may take from its create to fetching its launch: a boot and a download, with room. */
export const LAUNCH_EXPECTED_MS = 4 * 60_000;

/** When a boot attempt's VM should have fetched its launch: LAUNCH_EXPECTED_MS, or half its pool's boot timeout if that is sooner. */
export const launchDueMs = (bootTimeoutMs: number | undefined) => Math.min(LAUNCH_EXPECTED_MS, (bootTimeoutMs ?? 10 * 60_000) / 2);

/** Says once per boot attempt that its VM has not fetched its launch in time; true when this call said it. */
export async function watchLaunch(deps: ProcessDeps, r: AssignmentRecord | null | undefined, pool: string | undefined): Promise<boolean> {
  const watch = deps.launchWatch;
  if (!watch || !r?.askedAt || r.launchedAt || r.launchLate || (r.state !== "backend_pending" && r.state !== "backend_ready")) return false;
  const bootTimeoutMs = pool ? deps.pools.get(pool)?.bootTimeoutMs : undefined;
  const waited = deps.now() - Date.parse(r.askedAt);
  if (!(waited > launchDueMs(bootTimeoutMs))) return false;
  const { changed } = await markLaunchLate(deps.records, r.id, r.askedAt);
  if (!changed) return false;
  const span = (ms: number) => (ms < 120_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`);
  deps.sink.event({
    event: "launch_not_fetched",
    assignment: r.id,
    backend: deps.backend,
    ...(pool ? { pool } : {}),
    reason:
      `its ${watch.thing} was asked for ${span(waited)} ago and has not fetched its launch: check that it reaches PUBLIC_URL, ` +
      `has curl or wget, and that the runner's checksum matches; it is billed until its boot timeout (${span(bootTimeoutMs ?? 600_000)}), ${watch.cost}`,
  });
  if (pool) await deps.countLaunchMissed?.(pool).catch(() => undefined);
  return true;
}
