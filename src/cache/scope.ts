// Which of its repository's cache entries a job may read, and where it writes: GitHub's rules
// ("Dependency caching reference", Restrictions for accessing a cache) as far as each forge tells
// the Worker the job's ref, and the safe side where it does not. A scope is a string within one
// repository: `branch:<name>`, `run:<run id>`, or Forgejo's `isolated:<write-isolation key>` and
// `shared`. Nothing here crosses repositories: every entry is kept under its repository first.

export interface ScopeFacts {
  forge: "gitea" | "forgejo";
  runId: number;
  /**
   * Gitea: the webhook's workflow_job.head_branch, the branch of the run's ref (Gitea's
   * git.RefName(run.Ref).BranchName()): "" for a pull request's run (refs/pull/N/head) and a tag's.
   */
  headBranch?: string | undefined;
  /** Gitea: the webhook's repository.default_branch. */
  defaultBranch?: string | undefined;
  /** Forgejo: the write-isolation key the proxy's MAC binds: `refs/pull/N/head` for a pull request's job, "" otherwise. */
  isolationKey?: string | undefined;
}

export interface Scopes {
  /** In the order lookups search them. */
  read: string[];
  write: string;
}

export const SHARED = "shared";

export function scopesOf(f: ScopeFacts): Scopes {
  if (f.forge === "forgejo") {
    // As Forgejo's own cache server: a pull request's job writes apart and reads its own, then the shared entries.
    const key = f.isolationKey ?? "";
    return key ? { read: [`isolated:${key}`, SHARED], write: `isolated:${key}` } : { read: [SHARED], write: SHARED };
  }
  const fallback = f.defaultBranch ? [`branch:${f.defaultBranch}`] : [];
  // A branch's run (a push, a schedule, a dispatch, pull_request_target on the base): its branch, then the default one.
  if (f.headBranch) return { read: unique([`branch:${f.headBranch}`, ...fallback]), write: `branch:${f.headBranch}` };
  // A pull request's or a tag's run, told apart by nothing the webhook says: its own run's scope
  // (its re-runs restore it), then the default branch; it never writes a branch's scope.
  const own = `run:${f.runId}`;
  return { read: [own, ...fallback], write: own };
}

const unique = (list: string[]) => [...new Set(list)];
