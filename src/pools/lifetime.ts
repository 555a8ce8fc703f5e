// maxLifetimeMs: a hard cap on a runner's life, its job included. The cron tick looks at every
// runner that holds a slot (one request per backend, one for their records) and ends those of a
// pool older than their pool's cap: the record first (compare-and-set, so a completion that lands
// meanwhile wins), then the slots, the workload and the Gitea runner. A job still running on it
// fails in Gitea: that is what the cap is for.
import type { BackendAccess, Basics, ForgeAccess, Settings, State, StoreAccess } from "../domain/context.ts";
import { TERMINAL } from "../domain/operations.ts";
import { placementOf, type AssignmentRecord } from "../state/records.ts";
import { endRunner } from "./end.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings<"backends" | "pools">;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records">;

/** When a runner's life began: its registration, else when it was first asked for. */
export function bornAt(r: AssignmentRecord): number {
  return Date.parse(r.runner?.registeredAt ?? r.askedAt ?? r.receivedAt);
}

export async function enforceLifetimes(d: Deps, state: Stores): Promise<number> {
  const caps = new Map(d.config.pools.map((p) => [p.name, p.maxLifetimeMs]));
  if (!caps.size) return 0;
  const holders = (await Promise.all(d.config.backends.map((b) => state.admission.holders(b.backend)))).flat();
  const records = await state.records.getMany(holders);
  let ended = 0;
  for (const { value: r } of records.values()) {
    const cap = caps.get(r.placement?.pool ?? "");
    if (cap === undefined || TERMINAL.has(r.state) || d.now() - bornAt(r) <= cap) continue;
    const reason = `reached its pool's maxLifetimeMs (${cap} ms)`;
    const after = await endRunner(d, state, r.id, reason, (c) => !TERMINAL.has(c.state));
    if (!after) continue;
    const place = placementOf(after);
    d.sink.event({ event: "lifetime_reached", assignment: r.id, backend: place.backend, ...(place.pool ? { pool: place.pool } : {}), reason });
    ended++;
  }
  return ended;
}
