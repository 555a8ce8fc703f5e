// The cron tick's rerun step: each job lost with an interrupted runner (state/reruns.ts) is asked
// to run again once its run has finished (Gitea refuses a rerun before), at most once: the entry
// is marked as being asked (compare-and-set) before the forge is asked, and a rerun that took is
// found by the forge's look at the job itself (forge.ts JobReruns), so a tick cut short after
// asking finds it rerun and never asks again. The execution a rerun made is noted before the entry
// says so, for MAX_RERUNS and the pool's on-demand fallback. A forge with no rerun API (Gitea 1.24
// and 1.25, Forgejo) leaves it to a person: the status page, an event and a metric say so.
import type { Basics, ForgeAccess, StoreAccess } from "./context.ts";
import type { LostJob } from "./forge.ts";
import type { Versioned } from "../state/kv.ts";
import type { RerunEntry } from "../state/reruns.ts";

type Deps = Basics & StoreAccess & ForgeAccess;

/** Waiting entries one tick looks at: each costs a few forge requests. */
export const RERUNS_PER_TICK = 20;

export type RerunStep = "asked" | "by_hand" | "refused" | "settled" | "waiting" | "taken";

/** Moves every waiting entry on as far as it can now; the count of each outcome. */
export async function askReruns(d: Deps): Promise<Record<RerunStep, number>> {
  const counts: Record<RerunStep, number> = { asked: 0, by_hand: 0, refused: 0, settled: 0, waiting: 0, taken: 0 };
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
    const event = ({ asked: "rerun_asked", by_hand: "rerun_by_hand", settled: "rerun_settled", refused: "rerun_refused", waiting: "rerun_refused" } as const)[
      next.state
    ];
    d.sink.event({ event, assignment: e.id, backend: undefined, ...(e.pool ? { pool: e.pool } : {}), ...(next.reason ? { reason: next.reason } : {}) });
    return next.state === "waiting" ? "waiting" : next.state;
  };
  // The rerun is noted under its own execution first: an entry that says asked always has its note.
  const rerun = async (from: RerunEntry, next: string, rev: number): Promise<RerunStep> => {
    await d.withState((s) => s.reruns.noteRerun(next, e.id, (e.reruns ?? 0) + 1));
    return settle({ ...from, state: "asked", next, askedAt: from.askedAt ?? at }, rev);
  };
  if (!reruns) return settle({ ...e, state: "by_hand", reason: "this forge cannot rerun a job: rerun it by hand" }, revision);
  const lost: LostJob = { repository: e.repository, run: e.run, job: e.job, execution: e.attempt };
  const look = await reruns.look(lost);
  if (look.step === "wait") return "waiting";
  if (look.step === "by_hand") return settle({ ...e, state: "by_hand", reason: look.reason }, revision);
  // Cancelled by a person or by a newer run of the workflow: it was not lost to the interruption.
  if (look.step === "settled") return settle({ ...e, state: "settled", reason: look.reason }, revision);
  if (look.step === "rerun") return rerun(e, look.next, revision);
  // Marked before it is asked: of two ticks that read this entry, the one whose mark lands asks.
  const marked = { ...e, askedAt: at };
  const markedAt = await d.withState((s) => s.reruns.move(marked, revision));
  if (markedAt === null) return "taken";
  const answer = await reruns.ask(lost, look.job);
  if (answer.step === "rerun") return rerun(marked, answer.next, markedAt);
  // Not now (another rerun made the attempt first): the next tick looks again.
  if (answer.step === "wait") return "waiting";
  return settle({ ...marked, state: answer.step, reason: answer.reason }, markedAt);
}
