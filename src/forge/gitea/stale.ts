// A queued delivery older than the record that would deduplicate it may be a captured one,
// replayed: only Gitea can say whether its job is still queued.
import type { Basics, ForgeAccess, Settings } from "../../domain/context.ts";
import { giteaClientOf } from "./client-of.ts";
import { Unavailable } from "../../model/errors.ts";
import { RECORD_TTL_MS } from "../../nats/layout.ts";

/** What this module's steps are given (domain/context.ts). */
type Deps = Basics & ForgeAccess & Settings<"gitea">;

/**
 * Why a queued delivery is not to be trusted, or undefined. A job older than its record's TTL may
 * be a captured delivery replayed after the record that deduplicates it expired: only Gitea can
 * say whether it is still queued (the sweep does the same for jobs whose webhook was lost).
 */
export async function staleReplay(
  d: Deps,
  job: { id: number; run_attempt?: number | undefined; created_at?: string | undefined },
  repository: string,
): Promise<string | undefined> {
  // An age nobody can tell (no created_at, or one that does not parse) counts as old.
  const created = Date.parse(job.created_at ?? "");
  if (Number.isFinite(created) && d.now() - created <= STALE_AFTER_MS) return undefined;
  const gitea = giteaClientOf(d.forge);
  if (!gitea || !d.config.gitea?.apiToken) return "job older than the record TTL, and without GITEA_API_TOKEN Gitea cannot confirm it is queued";
  let current;
  try {
    current = await gitea.getJob(repository, job.id);
  } catch (err) {
    throw new Unavailable(
      `Gitea could not confirm that job ${job.id} is still queued (${(err as Error).message}); nothing was queued, the sweep will find it if it is`,
    );
  }
  if (current?.status === "queued" && (current.run_attempt ?? 1) === (job.run_attempt ?? 1)) return undefined;
  return `job older than the record TTL and no longer queued in Gitea (${current?.status ?? "not found"})`;
}

/**
 * Gitea job statuses in which the job still needs a runner, or may again: anything else started
 * or ended. A replayed delivery is trusted only for a job still "queued" in its own attempt
 * (staleReplay): a job that went back to waiting was delivered again by Gitea itself.
 */
const STILL_WAITING = new Set(["queued", "waiting", "blocked"]);

export function stillWaiting(status: string): boolean {
  return STILL_WAITING.has(status);
}

/** A day short of the records' TTL: a delivery this old may have outlived the record that deduplicates it. */
const STALE_AFTER_MS = RECORD_TTL_MS - 24 * 60 * 60 * 1000;
