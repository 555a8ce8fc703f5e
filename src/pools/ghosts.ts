// A warm runner can run a job without our hearing of it: its in_progress and completed webhooks
// were lost (NATS away when Gitea sent them, and Gitea does not send twice). It then exits, and
// Gitea deletes it (ephemeral), while its record still says it waits idle, holding a warm position
// until maxIdleMs. The cron tick looks for those: a warm runner registered a while ago that Gitea
// no longer lists is gone, and its record is ended (compare-and-set: a claim that came meanwhile
// wins), so that its position is filled again. One runner list per tick and scope, and only when
// a warm runner is idle; a runner the list does not show is asked about on its own before it is
// taken for gone.
import type { BackendAccess, Basics, ForgeAccess, State, StoreAccess } from "../domain/context.ts";
import { placementOf, runnerAt, type AssignmentRecord } from "../state/records.ts";
import { endRunner } from "./end.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records" | "warm">;

/** A runner registered this recently may not be listed yet. */
const LISTED_AFTER_MS = 2 * 60_000;

export async function endGhosts(d: Deps, state: Stores): Promise<number> {
  const forge = d.forge;
  const directory = forge?.runners;
  const list = directory?.list;
  if (!forge || !directory || !list) return 0;
  const ids = [...(await state.warm.list()).values()].flat().map((s) => s.id);
  const records = [...(await state.records.getMany(ids)).values()].map((v) => v.value);
  const now = d.now();
  const suspects = records.filter((r) => r.warm && r.state === "backend_ready" && r.runner && now - Date.parse(r.runner.registeredAt) > LISTED_AFTER_MS);
  if (!suspects.length) return 0;
  // Listed at GITEA_SCOPE, or, for a pool registered elsewhere, at that pool's scope.
  const byScope = new Map<string | undefined, AssignmentRecord[]>();
  for (const r of suspects) {
    const at = forge.listsAtHome(r.runner!.scope) ? undefined : r.runner!.scope;
    byScope.set(at, [...(byScope.get(at) ?? []), r]);
  }
  let ended = 0;
  for (const [scope, group] of byScope) {
    const listed = await list(scope);
    for (const r of listed ? group : []) {
      if (listed!.has(r.runner!.id)) continue;
      // A list read page by page can skip a runner (one deleted between two reads shifts the
      // rest): only Gitea's answer for this runner says it is gone.
      if ((await directory.get(runnerAt(r)!).catch(() => "unknown" as const)) !== null) continue;
      const reason = "its runner is gone from Gitea: it ran a job whose webhooks were lost";
      const after = await endRunner(d, state, r.id, reason, (c) => c.state === "backend_ready", { inGitea: false });
      if (!after) continue;
      const place = placementOf(after);
      d.sink.event({ event: "warm_gone", assignment: r.id, backend: place.backend, ...(place.pool ? { pool: place.pool } : {}), reason });
      ended++;
    }
  }
  return ended;
}
