// The cron tick's rerun step: each job lost with an interrupted runner (state/reruns.ts) is asked
// to run again once its run has finished (Gitea refuses a rerun before), at most once: the entry
// is marked as being asked (compare-and-set) before the forge is asked, and a rerun that took is
// known by the run's later attempt, so a tick cut short after asking finds it asked and never asks
// again. A forge with no rerun endpoint (Gitea 1.25, Forgejo) leaves it to a person: the status
// page, an event and a metric say so, with the run's link.
import type { Basics, ForgeAccess, StoreAccess } from "./context.ts";
import type { Versioned } from "../state/kv.ts";
import type { RerunEntry } from "../state/reruns.ts";

type Deps = Basics & StoreAccess & ForgeAccess;

/** Waiting entries one tick looks at: each costs one or two forge requests. */
export const RERUNS_PER_TICK = 20;

export type RerunStep = "asked" | "by_hand" | "refused" | "waiting" | "taken";

/** Moves every waiting entry on as far as it can now; the count of each outcome. */
export async function askReruns(d: Deps): Promise<Record<RerunStep, number>> {
  const counts: Record<RerunStep, number> = { asked: 0, by_hand: 0, refused: 0, waiting: 0, taken: 0 };
  const waiting = (await d.withState((s) => s.reruns.list())).filter((e) => e.value.state === "waiting").slice(0, RERUNS_PER_TICK);
  for (const entry of waiting) {
    const step = await moveOn(d, entry).catch((err: unknown) => {
      // The forge could not be asked now (a timeout, a 5xx): the next tick asks again.
      d.sink.error("rerun step failed", { assignment: entry.value.id, reason: (err as Error).message });
      return "waiting" as const;
    });
    counts[step]++;
  }
  return counts;
}

async function moveOn(d: Deps, { value: e, revision }: Versioned<RerunEntry>): Promise<RerunStep> {
  const at = new Date(d.now()).toISOString();
  const reruns = d.forge?.reruns;
  const settle = async (next: RerunEntry, from: number): Promise<RerunStep> => {
    if ((await d.withState((s) => s.reruns.move(next, from))) === null) return "taken";
    const event = next.state === "asked" ? "rerun_asked" : next.state === "by_hand" ? "rerun_by_hand" : "rerun_refused";
    d.sink.event({ event, assignment: e.id, backend: undefined, ...(e.pool ? { pool: e.pool } : {}), ...(next.reason ? { reason: next.reason } : {}) });
    return next.state === "asked" || next.state === "by_hand" || next.state === "refused" ? next.state : "waiting";
  };
  if (!reruns) return settle({ ...e, state: "by_hand", reason: "this forge cannot rerun a job: rerun it by hand" }, revision);
  const run = await reruns.run(e.repository, e.run);
  if (!run) return settle({ ...e, state: "by_hand", reason: "the forge has no such run any more: rerun it by hand" }, revision);
  // A later attempt: asked before (by a tick cut short after asking, or by a person).
  if (run.attempt > e.attempt) return settle({ ...e, state: "asked", askedAt: e.askedAt ?? at }, revision);
  if (!run.done) return "waiting";
  // Marked before it is asked: of two ticks that read this entry, the one whose mark lands asks.
  const marked = { ...e, askedAt: at };
  const markedAt = await d.withState((s) => s.reruns.move(marked, revision));
  if (markedAt === null) return "taken";
  const answer = await reruns.rerun(e.repository, e.run, e.job).catch((err: unknown) => {
    const status = (err as { status?: number }).status;
    // Refused for good (a 4xx other than 404/405: the token may not rerun, or the job cannot be): a person decides.
    if (status !== undefined && status >= 400 && status < 500) return `refused (${status})` as const;
    throw err;
  });
  if (answer === "asked") return settle({ ...marked, state: "asked" }, markedAt);
  if (answer === "absent") return settle({ ...marked, state: "by_hand", reason: "this forge has no rerun endpoint (Gitea 1.25): rerun it by hand" }, markedAt);
  return settle({ ...marked, state: "refused", reason: `the forge ${answer} the rerun: rerun it by hand` }, markedAt);
}
