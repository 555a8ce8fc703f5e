// A runner's machine taken back by its cloud (a Spot interruption), told by the runner's watcher
// (POST /v1/assignments/:id/interrupt) or found by a driver's sweep. Before the claim the job never
// started: a new runner is asked for under a new incarnation (the old runner's claim token is
// refused from then on), and its driver ends the old machine before it makes the new one. After
// the claim the job is lost with its runner: the assignment ends, its runner goes from the forge
// and the cloud, and the job is listed for a rerun (domain/reruns.ts) before the end is written,
// so that no interruption is recorded without its rerun.
import { z } from "zod";
import { toFieldIssues } from "../model/assignment.ts";
import { Conflict, InvalidInput, NotFound } from "../model/errors.ts";
import type { BackendAccess, Basics, ForgeAccess, Settings, StoreAccess } from "./context.ts";
import { giteaRunnerOf, StaleClaimToken, viewOf, type AssignmentView } from "./operations.ts";
import { releaseRunner } from "./teardown.ts";
import { incarnationOf, placementOf, type AssignmentRecord, type Interruption } from "../state/records.ts";
import type { RerunEntry } from "../state/reruns.ts";
import { endInterrupted, isWaiting, replaceInterrupted } from "../state/transitions.ts";

/** What the watcher POSTs: EC2's spot/instance-action document as IMDS gives it. */
export const interruptBody = z
  .strictObject({
    action: z.enum(["terminate", "stop", "hibernate"]),
    time: z.iso.datetime({ offset: true }).meta({ description: "When the cloud takes the machine back" }),
  })
  .meta({ id: "InterruptNotice" });

export const MAX_NOTICE_BYTES = 1024;

/** The notice's time from a request body; InvalidInput naming the field otherwise. */
export function parseNotice(value: unknown): { notice: string } {
  const parsed = interruptBody.safeParse(value);
  if (!parsed.success) throw new InvalidInput("invalid interruption notice", toFieldIssues(parsed.error));
  return { notice: new Date(parsed.data.time).toISOString() };
}

type Deps = Basics & StoreAccess & BackendAccess & ForgeAccess & Settings<"maxReruns" | "backends">;

/**
 * - replaced: it came before the claim; a new runner is asked for;
 * - lost: it came after the claim; the job is listed for a rerun;
 * - over: the assignment had ended, or this interruption was told already: nothing changes.
 */
export type InterruptOutcome = "replaced" | "lost" | "over";

export interface Interrupt {
  /** When the cloud takes the machine back (the notice's time). */
  notice: string;
  by: Interruption["by"];
  /** The incarnation the runner's claim token was signed for; absent for the sweep, which names the record it read. */
  incarnation?: string;
}

/** Interruption of assignment `id`'s runner. Idempotent: a second report of the same runner changes nothing. */
export async function interruptAssignment(d: Deps, id: string, told: Interrupt): Promise<{ outcome: InterruptOutcome; view: AssignmentView }> {
  const at = new Date(d.now()).toISOString();
  const mine = (r: AssignmentRecord) => told.incarnation === undefined || incarnationOf(r) === told.incarnation;
  const result = await d.withState(async (state) => {
    const before = await state.records.get(id);
    if (!before) throw new NotFound(`no assignment ${id}`);
    // Only a driver that ends the old machine and makes a new one on a new incarnation may take a runner's report: elsewhere the old machine would keep running while its identity went.
    const backend = d.config.backends.find((b) => b.backend === before.backend);
    if (told.by === "runner" && !backend?.interruptible)
      throw new Conflict(
        `backend ${before.backend} (driver ${backend?.driver ?? "unknown"}) does not replace a runner on an interruption: the report is not taken`,
      );
    if (!mine(before)) {
      // The runner replaced already (its report came twice) is answered as told; another's token is refused.
      if (before.interrupted && before.replaced && told.incarnation === incarnationOf({ ...before, replaced: before.replaced - 1 }))
        return { outcome: "over" as const, record: before };
      throw new StaleClaimToken(id);
    }
    if (isWaiting(before)) {
      const { record, changed } = await replaceInterrupted(state.records, id, { at, notice: told.notice, claimed: false, by: told.by }, mine);
      if (changed && record) {
        // Its runner's identity is forgotten: the next delivery registers the replacement's now,
        // not once the old registration's reservation has run out.
        await state.admission.endRegistrations(placementOf(record).backend, [id]);
        return { outcome: "replaced" as const, record, gone: before };
      }
      return settledAfter(record, id);
    }
    if (before.state !== "claimed") return { outcome: "over" as const, record: before };
    const interrupted: Interruption = { at, notice: told.notice, claimed: true, by: told.by };
    // Listed first: an end written without its rerun would lose the job for good.
    const prior = (await state.reruns.rerunOf(id))?.reruns ?? 0;
    const entry = rerunEntryOf(before, at, d.forge !== undefined && d.forge.reruns !== undefined, d.config.maxReruns, prior);
    if (entry) await state.reruns.add(entry);
    const { record, changed } = await endInterrupted(state.records, id, interrupted, mine);
    if (!changed || !record) return settledAfter(record, id);
    await state.admission.release(placementOf(record), id);
    return { outcome: "lost" as const, record, gone: before };
  });
  const { outcome, record } = result;
  const pool = record.placement?.pool;
  if (outcome !== "over")
    await d
      .withState((s) => s.reruns.count(pool ?? "none", outcome === "replaced" ? "before" : "after"))
      .catch((err: unknown) => d.sink.error("counting an interruption failed", { assignment: id, reason: (err as Error).message }));
  if (outcome === "replaced") {
    d.sink.event({ event: "interrupted_before_claim", assignment: id, backend: record.backend, ...(pool ? { pool } : {}), reason: told.by });
    // The old runner's identity is forgotten: it goes from the forge (its driver ends its machine
    // when it asks for the new one, so that no two runners of one assignment live at once).
    const old = "gone" in result ? result.gone?.runner : undefined;
    if (old && d.forge) await d.forge.deleteRunner({ id: old.id, scope: old.scope }).catch(() => undefined);
  }
  if (outcome === "lost") {
    d.sink.event({ event: "interrupted_after_claim", assignment: id, backend: record.backend, ...(pool ? { pool } : {}), reason: told.by });
    await releaseRunner(d, id, placementOf(record).backend, giteaRunnerOf(viewOf(record)));
  }
  return { outcome, view: viewOf(record) };
}

/** After a write that changed nothing: a claim, an end or an earlier report won the race. */
function settledAfter(record: AssignmentRecord | null, id: string): { outcome: "over"; record: AssignmentRecord } {
  if (!record) throw new NotFound(`no assignment ${id}`);
  if (record.state === "claimed") throw new Conflict(`assignment ${id} was claimed meanwhile: report it again`);
  return { outcome: "over", record };
}

/**
 * The rerun entry of a job lost with its runner: waiting for its run to finish where the forge
 * can rerun a job and the dispatcher asked fewer than MAX_RERUNS reruns of this job before
 * (`prior`: the reruns behind this execution, state/reruns.ts rerunOf), else one for a person.
 * Undefined for a runner with no job of its own (warm, or a forge job without ids).
 */
export function rerunEntryOf(r: AssignmentRecord, at: string, forgeReruns: boolean, maxReruns: number, prior = 0): RerunEntry | undefined {
  const job = r.job;
  if (!job || job.id === undefined || job.run === undefined || job.attempt === undefined) return undefined;
  const within = prior < maxReruns;
  const reason = !forgeReruns
    ? "this forge cannot rerun a job: rerun it by hand"
    : `the dispatcher reran this job ${prior} time${prior === 1 ? "" : "s"} already, MAX_RERUNS is ${maxReruns}: rerun it by hand`;
  return {
    id: r.id,
    repository: job.repository,
    run: job.run,
    job: job.id,
    attempt: job.attempt,
    ...(prior ? { reruns: prior } : {}),
    ...(r.placement?.pool ? { pool: r.placement.pool } : {}),
    since: at,
    state: forgeReruns && within ? "waiting" : "by_hand",
    ...(forgeReruns && within ? {} : { reason }),
  };
}
