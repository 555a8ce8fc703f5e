// What the dispatcher needs of a forge, apart from which forge it is: the runner's credentials,
// the periodic work that finds what webhooks missed (Gitea's sweep, Forgejo's poller), and the
// deletion of a runner. One implementation per forge (gitea/forge.ts, forgejo/forge.ts).
import type { Assignment } from "../model/assignment.ts";
import type { AssignmentRecord, RunnerRef } from "../state/records.ts";
import type { RunnerFile } from "./runner-identity.ts";

/** FORGE: which forge the jobs come from. */
export const FORGES = ["gitea", "forgejo"] as const;
export type ForgeKind = (typeof FORGES)[number];

/** What `forgejo-runner one-job` starts with: its connection, its labels, and the job it is bound to. */
export interface ForgejoRunnerIdentity {
  url: string;
  uuid: string;
  /** The runner's own token (read by the runner from a `file:` URL); never the API token. */
  token: string;
  labels: string[];
  /** The job attempt's handle: the runner takes that job and no other. */
  handle?: string;
}

/** A runner's credentials, as the backend hands them to the workload. */
export type RunnerIdentity = { forge: "gitea"; file: RunnerFile } | { forge: "forgejo"; runner: ForgejoRunnerIdentity };

/**
 * An identity for one assignment: opened from its record, or registered now by the caller that
 * holds the registration reservation (then `ref` is to be stored in the record). "busy": another
 * invocation is registering it; try again later.
 */
export type IdentityOutcome = "busy" | { identity: RunnerIdentity; ref?: RunnerRef };

/** A runner in the forge and where it was registered (a scope key; absent: the configured scope). */
export interface ForgeRunner {
  id: number;
  scope?: string | undefined;
}

/**
 * A forge. `Ctx` is the dispatcher (kept generic so that this module imports nothing of it).
 * Every method is safe to call again: registration is reserved per assignment, deletion of a
 * runner the forge no longer has succeeds.
 */
export interface Forge<Ctx = unknown> {
  readonly kind: ForgeKind;
  /**
   * The runner identity of `assignment` with `labels` (its pool's), registering it when
   * `reserved` and the record has none yet.
   */
  identity(
    assignment: Assignment,
    labels: string[],
    record: AssignmentRecord,
    reserved: boolean,
    pool: { scope?: string | undefined } | undefined,
  ): Promise<IdentityOutcome>;
  /** A cron tick's forge work: find what webhooks missed and clean up runners left behind. */
  tick(ctx: Ctx): Promise<void>;
  /** Deletes a runner from the forge; one the forge no longer has is gone already. */
  deleteRunner(runner: ForgeRunner): Promise<void>;
}
