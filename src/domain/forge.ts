// What the dispatcher needs of a forge, apart from which forge it is: the runner's credentials,
// the periodic work that finds what webhooks missed (Gitea's sweep, Forgejo's poller), and the
// deletion of a runner. One implementation per forge (gitea/forge.ts, forgejo/forge.ts).
import type { Assignment } from "../model/assignment.ts";
import type { AssignmentRecord, RunnerRef } from "../state/records.ts";
import type { ForgejoRunnerIdentity, RunnerIdentity } from "./runner-identity.ts";
import type { LaunchInput, RunnerRequest } from "./backend.ts";

export type { ForgejoRunnerIdentity, RunnerIdentity };

/** FORGE: which forge the jobs come from. */
export const FORGES = ["gitea", "forgejo"] as const;
export type ForgeKind = (typeof FORGES)[number];

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
  /**
   * What a runner request carries of the runner `identity`: its credentials as the http driver
   * sends them, and how its program starts (`launch`) for the drivers that start it themselves
   * (kubernetes, kubevirt), which know no forge. `handleUrl`: where a runner with no job yet asks
   * for one.
   */
  runnerFields(identity: RunnerIdentity, input: LaunchInput & { handleUrl: string }): Pick<RunnerRequest, "runner" | "forgejo" | "handleUrl" | "launch">;
  /** Deletes a runner from the forge; one the forge no longer has is gone already. */
  deleteRunner(runner: ForgeRunner): Promise<void>;
  /**
   * What the forge can say of its runners one by one; absent where it says nothing (then a runner
   * is never taken for busy, and the runners it lost go unnoticed until their timeouts).
   */
  readonly runners?: RunnerDirectory | undefined;
  /**
   * Whether the runner list the cron tick's cleanup reads (the configured scope's) shows a runner
   * registered at `scope` (a scope key; absent: the configured scope). A failed teardown of a
   * runner it shows is retried by that cleanup; of one it does not, from the teardown list.
   */
  listsAtHome(scope: string | undefined): boolean;
  /** Whether a runner registered at `scope` may stand as a warm runner of a pool registered at `poolScope` (it would see that pool's jobs). */
  fitsWarm(scope: string | undefined, poolScope: string | undefined): boolean;
  /** The forge's jobs are found by a poller whose health is kept (state/forge-health.ts) and shown in /metrics and /v1/status. */
  readonly polled: boolean;
  /** Whether the forge still has job `id` of `repository` waiting for a runner (or about to again); absent where it cannot be asked. */
  readonly jobWaiting?: ((repository: string, id: number) => Promise<boolean>) | undefined;
  /**
   * Why a job whose runner reached its claim timeout cannot be taken yet though that runner is
   * alive, or undefined (then the runner goes and the job is given a new one): Forgejo lists a job
   * of a concurrency group `waiting` while an earlier run of its group holds it, and its runner,
   * polling for that one job, takes it once the group frees. Absent where the forge cannot say.
   */
  readonly claimHeld?: ((job: { id: number; handle?: string | undefined }, runner: ForgeRunner) => Promise<string | undefined>) | undefined;
  /** Reruns of a job lost with an interrupted runner; absent where the forge has no way to ask (Forgejo, Gitea without an API token). */
  readonly reruns?: JobReruns | undefined;
  /** The web address of a workflow run, for people (the status page's "rerun it by hand"). */
  runLink?(repository: string, run: number): string;
}

/** A job lost with its runner, as the rerun list keeps it (state/reruns.ts). */
export interface LostJob {
  repository: string;
  run: number;
  /** The job's id in the forge when it was lost. */
  job: number;
  /** Which execution of the job was lost (1 for its first run). */
  execution: number;
}

/**
 * Where a lost job's rerun stands in the forge:
 * - wait: not yet (its run has not finished, and the forge refuses a rerun before);
 * - ask: it may be asked for now, with job `job` (Gitea 1.27: the job's copy in the run's latest attempt);
 * - rerun: it runs again already (asked before, by a tick cut short or by a person): `next` is that execution's assignment;
 * - by_hand: the forge cannot rerun it (no rerun API, no such run or job any more): a person must.
 */
/** settled: the job or its run was cancelled (not lost to the interruption): nothing is rerun. */
export type RerunLook =
  { step: "wait" } | { step: "ask"; job: number } | { step: "rerun"; next: string } | { step: "by_hand"; reason: string } | { step: "settled"; reason: string };

/** The forge's answer to a rerun asked for: it took it (`next`), not now (ask again later), refused it, or cannot. */
export type RerunAsked =
  { step: "rerun"; next: string } | { step: "wait"; reason: string } | { step: "refused"; reason: string } | { step: "by_hand"; reason: string };

/** How a forge is asked to rerun one job lost with its runner. Each call throws when the forge cannot be asked now. */
export interface JobReruns {
  look(job: LostJob): Promise<RerunLook>;
  ask(job: LostJob, id: number): Promise<RerunAsked>;
}

/** A forge's answers about single runners. Each call throws when the forge cannot be asked. */
export interface RunnerDirectory {
  /** The runner now (busy: it runs a task; absent where the forge does not say); null when the forge no longer has it. */
  get(runner: ForgeRunner): Promise<{ busy?: boolean | undefined } | null>;
  /** Stops the forge handing the runner tasks; false where it cannot (an older forge, a runner it no longer has). */
  disable(runner: ForgeRunner): Promise<boolean>;
  /**
   * The ids of the runners listed at `scope` (absent: the configured scope), or undefined when
   * the list is longer than the forge is asked to read (it says nothing of the rest). Absent
   * where the forge gives no list to read.
   */
  list?: ((scope: string | undefined) => Promise<Set<number> | undefined>) | undefined;
}
