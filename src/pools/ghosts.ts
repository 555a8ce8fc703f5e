// A warm runner can run a job without our hearing of it: its in_progress and completed webhooks
// were lost (NATS away when Gitea sent them, and Gitea does not send twice). It then exits, and
// Gitea deletes it (ephemeral), while its record still says it waits idle, holding a warm position
// until maxIdleMs. The cron tick looks for those: a warm runner registered a while ago that Gitea
// no longer lists is gone, and its record is ended (compare-and-set: a claim that came meanwhile
// wins), so that its position is filled again. One runner list per tick, and only when a warm
// runner is idle.
import type { Dispatcher, State } from "../dispatcher-types.ts";
import { placementOf } from "../state/records.ts";
import { endRunner } from "./end.ts";

/** A runner registered this recently may not be listed yet. */
const LISTED_AFTER_MS = 2 * 60_000;
const PAGE = 50;

export async function endGhosts(d: Dispatcher, state: State): Promise<number> {
  const gitea = d.config.gitea;
  if (!d.gitea || !gitea?.apiToken || gitea.jobPages === 0) return 0;
  const ids = [...(await state.warm.list()).values()].flat().map((s) => s.id);
  const records = [...(await state.records.getMany(ids)).values()].map((v) => v.value);
  const now = d.now();
  const suspects = records.filter((r) => r.warm && r.state === "backend_ready" && r.runner && now - Date.parse(r.runner.registeredAt) > LISTED_AFTER_MS);
  if (!suspects.length) return 0;
  const listed = new Set<number>();
  for (let page = 1; page <= gitea.jobPages; page++) {
    const { runners } = await d.gitea.listRunners(page, PAGE);
    for (const r of runners) listed.add(r.id);
    // A runner list cut short by GITEA_JOB_PAGES says nothing of the runners after it.
    if (runners.length < PAGE) break;
    if (page === gitea.jobPages) return 0;
  }
  let ended = 0;
  for (const r of suspects) {
    if (listed.has(r.runner!.id)) continue;
    const reason = "its runner is gone from Gitea: it ran a job whose webhooks were lost";
    const after = await endRunner(d, state, r.id, reason, (c) => c.state === "backend_ready", { inGitea: false });
    if (!after) continue;
    const place = placementOf(after);
    d.sink.event({ event: "warm_gone", assignment: r.id, backend: place.backend, ...(place.pool ? { pool: place.pool } : {}), reason });
    ended++;
  }
  return ended;
}
