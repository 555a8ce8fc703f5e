// What a cron tick does for the pools, before its reconcile pass: end warm runners gone from Gitea,
// bring every pool to its warm target, and end runners past their lifetime. Each part's failure is
// logged and the tick goes on.
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "../domain/context.ts";
import { endGhosts } from "./ghosts.ts";
import { enforceLifetimes } from "./lifetime.ts";
import { maintainPools } from "./maintain.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings;

export async function tendPools(d: Deps): Promise<void> {
  const failed = (what: string) => (err: unknown) => d.sink.error(`${what} failed`, { reason: (err as Error).message });
  await d
    .withState(async (state) => {
      await endGhosts(d, state).catch(failed("looking for warm runners gone from Gitea"));
      await maintainPools(d, state).catch(failed("pool maintenance"));
      await enforceLifetimes(d, state).catch(failed("runner lifetimes"));
    })
    .catch(failed("pool upkeep"));
}
