// A job that went away before a runner took it (in Gitea or Forgejo): its assignment is terminated, or, when it
// has none yet, a tombstone is left for the `queued` that may still come.
import type { Dispatcher } from "../domain/context.ts";
import type { Backend } from "../nats/names.ts";
import { TERMINAL, type Released } from "../domain/operations.ts";
import { placementOf, type AssignmentRecord } from "../state/records.ts";

/**
 * The job went away before a runner took it: the assignment is terminated (its message is termed
 * at its next delivery) and its slot released. Returns the record when this call terminated it.
 * With `tombstone`, an id that has no record yet gets a terminated one, so that a `queued`
 * delivered after the job's end provisions nothing (`tombstoned` in the result).
 */
export async function cancelAssignment(
  d: Dispatcher,
  id: string,
  reason: string,
  tombstone?: Tombstone,
): Promise<Released<{ record: AssignmentRecord; tombstoned?: true }> | null> {
  const at = new Date(d.now()).toISOString();
  let changed = false;
  let contended = false;
  let tombstoned: AssignmentRecord | null = null;
  const record = await d.withState(async (state) => {
    const terminate = () =>
      state.records.update(id, (r) =>
        (changed = !TERMINAL.has(r.state) && r.state !== "claimed") ? { ...r, state: "terminated", terminatedAt: at, reason } : undefined,
      );
    let r = await terminate();
    if (!r && tombstone) {
      tombstoned = await state.records.tombstone(id, tombstone.backend, tombstone.reason, tombstone.job);
      // Its queued's record came in between (a tombstone only creates): terminate that one.
      if (!tombstoned) r = await terminate();
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
