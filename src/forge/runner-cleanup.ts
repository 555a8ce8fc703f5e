// Runners of ours that no assignment needs, as both forges' cleanups find them in the forge's
// runner list: the rule (cleanupVerdict, pure) and carrying it out for one listed runner.
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "../domain/context.ts";
import type { Backend } from "../nats/names.ts";
import { TERMINAL } from "../model/states.ts";
import { isNatsUnavailable } from "../nats/connection.ts";
import { releaseRunner } from "../domain/teardown.ts";
import type { Admission } from "../state/admission.ts";
import { placementOf, type AssignmentRecord, type RecordStore } from "../state/records.ts";
import { forgetRunner } from "../state/transitions.ts";
import type { ForgeRunner } from "../domain/forge.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings<"claimTimeoutMs" | "pools">;

const FINISHED = TERMINAL;

export type CleanupVerdict = "keep" | "delete" | "delete_and_forget";

/** What to do with a runner named after one of our assignments. Pure. */
export function cleanupVerdict(
  record: AssignmentRecord | null,
  runnerId: number,
  now: number,
  limits: { claimTimeoutMs: number; graceMs: number; warmIdleMs?: number },
  /** A pass holds the assignment's registration reservation: it may be about to store this runner. */
  registering = false,
): CleanupVerdict {
  if (!record) return "delete";
  if (record.state === "completed" || record.state === "terminated") return "delete";
  if (!record.runner && registering) return "keep";
  if (!record.runner || record.runner.id !== runnerId) return "delete"; // a second registration, or one a dead pass never stored
  if (record.state === "claimed") return "keep";
  // An identity is reused when a runner is provisioned afresh after a claim timeout: the clock
  // starts with the latest incarnation, not with the registration.
  const since = Math.max(Date.parse(record.runner.registeredAt), record.readyAt ? Date.parse(record.readyAt) : 0);
  // A warm runner waits for any job as long as its pool keeps it idle; maintenance replaces it then.
  const timeout = record.warm ? Math.max(limits.claimTimeoutMs, limits.warmIdleMs ?? 0) : limits.claimTimeoutMs;
  return now - since > timeout + limits.graceMs ? "delete_and_forget" : "keep";
}

/**
 * Runs `fn` on one listed item. One bad item (a name we cannot key, a runner Gitea will not
 * delete) is an event, and the sweep goes on; NATS being unreachable ends the sweep instead.
 */
export async function eachItem(d: Deps, what: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (isNatsUnavailable(err)) throw err;
    d.sink.event({ event: "sweep_item_failed", assignment: "-", backend: undefined, reason: `${what}: ${(err as Error).message}` });
  }
}

/** What cleaning one listed runner needs (Gitea's sweep, Forgejo's cleanup). */
export interface CleanContext {
  d: Deps;
  records: RecordStore;
  admission: Admission;
  registering: (backend: Backend) => Promise<Set<string>>;
  summary: { runnersDeleted: number };
  /** CLEANUP_GRACE_MS */
  graceMs: number;
  /** Deletes the runner in the forge only (the backend's workload stays). */
  deleteRunner: (at: ForgeRunner) => Promise<void>;
}

/** Deletes a runner named after assignment `id` when no assignment needs it (cleanupVerdict). */
export async function cleanRunner({ d, records, admission, registering, summary, graceMs, deleteRunner }: CleanContext, runnerId: number, id: string) {
  const record = await records.get(id);
  const warmIdleMs = d.config.pools.find((p) => p.name === record?.placement?.pool)?.maxIdleMs;
  const limits = { claimTimeoutMs: d.config.claimTimeoutMs, graceMs, ...(warmIdleMs ? { warmIdleMs } : {}) };
  const place = record ? placementOf(record) : undefined;
  const reserved = record && !record.runner ? (await registering(place!.backend)).has(id) : false;
  const verdict = cleanupVerdict(record, runnerId, d.now(), limits, reserved);
  // Listed at GITEA_SCOPE; where the record says it was registered, it is deleted there.
  const at = { id: runnerId, ...(record?.runner?.id === runnerId && record.runner.scope ? { scope: record.runner.scope } : {}) };
  if (verdict === "keep") return;
  if (verdict === "delete_and_forget") {
    // Forget the identity first, so the next delivery registers afresh instead of reusing it.
    // A claim (or another sweep) that came after the read wins: the next sweep reads again.
    if (!(await forgetRunner(records, id, runnerId)).changed) return;
  }
  if (record && verdict === "delete_and_forget") {
    // Its slot and any registration reservation go too: the next delivery starts from scratch.
    await admission.release(place!, id);
    if (!(await releaseRunner(d, id, place!.backend, at))) return;
  } else if (record && FINISHED.has(record.state)) {
    // Still listed after its job ended: the teardown at the backend failed. Retried until it holds.
    if (!(await releaseRunner(d, id, place!.backend, at))) return;
  } else await deleteRunner(at);
  summary.runnersDeleted++;
  d.sink.event({ event: "runner_deleted", assignment: id, backend: record?.backend, reason: verdict });
}
