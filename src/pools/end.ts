// Ending a runner the pools no longer want (taken away, gone from Gitea, past its lifetime): the
// record first, by compare-and-set from a state `when` accepts, so that a claim or completion that
// landed meanwhile wins; then its slots, its workload and its Gitea runner.
import type { BackendAccess, Basics, ForgeAccess, State, StoreAccess } from "../domain/context.ts";
import { WAITING } from "../model/states.ts";
import { releaseRunner } from "../domain/teardown.ts";
import { placementOf, runnerAt, type AssignmentRecord } from "../state/records.ts";
import { terminate } from "../state/transitions.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess;
/** The stores this module's steps use (domain/context.ts State). */
type Stores = Pick<State, "admission" | "records">;

/** States in which a runner waits for a job (asked for, booting, or up and idle): the machine's. */
export { WAITING };

/**
 * The ended record, or null when `when` refused the record as it stood (or there was none).
 * `inGitea: false` leaves the Gitea runner alone (one Gitea no longer has).
 */
export async function endRunner(
  d: Deps,
  state: Stores,
  id: string,
  reason: string,
  when: (r: AssignmentRecord) => boolean,
  { inGitea = true } = {},
): Promise<AssignmentRecord | null> {
  const at = new Date(d.now()).toISOString();
  const { record: ended, changed } = await terminate(state.records, id, { at, reason, when });
  if (!ended || !changed) return null;
  const place = placementOf(ended);
  await state.admission.release(place, id);
  await releaseRunner(d, id, place.backend, inGitea ? runnerAt(ended) : undefined);
  return ended;
}
