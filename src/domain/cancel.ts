// A job that went away before a runner took it (in Gitea or Forgejo): its assignment is terminated, or, when it
// has none yet, a tombstone is left for the `queued` that may still come.
import type { Basics, StoreAccess } from "./context.ts";
import type { Backend } from "../nats/names.ts";
import { TERMINAL, type Released } from "./operations.ts";
import { placementOf, type AssignmentRecord } from "../state/records.ts";
import { terminate } from "../state/transitions.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess;

/**
 * The job went away before a runner took it: the assignment is terminated (its message is termed
 * at its next delivery) and its slot released. Returns the record when this call terminated it.
 * With `tombstone`, an id that has no record yet gets a terminated one, so that a `queued`
 * delivered after the job's end provisions nothing (`tombstoned` in the result).
 */
export async function cancelAssignment(
  d: Deps,
  id: string,
  reason: string,
  tombstone?: Tombstone,
): Promise<Released<{ record: AssignmentRecord; tombstoned?: true }> | null> {
  const at = new Date(d.now()).toISOString();
  let changed = false;
  let contended = false;
  let tombstoned: AssignmentRecord | null = null;
  const record = await d.withState(async (state) => {
    // Not once a runner took it: that runner's end is its own.
    const end = async () => {
      const ended = await terminate(state.records, id, { at, reason, when: (r) => !TERMINAL.has(r.state) && r.state !== "claimed" });
      changed = ended.changed;
      return ended.record;
    };
    let r = await end();
    if (!r && tombstone) {
      tombstoned = await state.records.tombstone(id, tombstone.backend, tombstone.reason, tombstone.job);
      // Its queued's record came in between (a tombstone only creates): terminate that one.
      if (!tombstoned) r = await end();
    }
    if (r && changed) contended = await state.admission.release(placementOf(r), id);
    return r;
  });
  if (tombstoned) {
    d.sink.event({ event: "tombstoned", assignment: id, backend: tombstone!.backend, reason: tombstone!.reason });
    return { record: tombstoned, contended: false, tombstoned: true };
  }
  if (!record || !changed) return null;
  d.sink.event({ event: "cancelled", assignment: id, backend: record.backend, reason });
  return { record, contended };
}

/** What a tombstone records of a job that ended before it was queued here. */
export interface Tombstone {
  backend: Backend;
  reason: string;
  job?: AssignmentRecord["job"];
}
