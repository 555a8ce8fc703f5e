// An assignment's record, as a type: its core, where it stands (each state with what it must
// have and cannot have, so that an impossible combination does not compile), and the optional
// parts beside it. The store and the helpers that read a record are records.ts.
import type { AssignmentState, Backend } from "../model/states.ts";

/** Who it is, where it was queued and when it came: every record has these. */
export interface RecordCore {
  id: string;
  backend: Backend;
  /** SHA-256 of the assignment's content without createdAt: equal means "the same assignment". */
  contentHash: string;
  createdAt: string;
  receivedAt: string;
  updatedAt: string;
  /** A cron pass holds the message until then and acks it itself once claimed (see hold.ts). */
  heldUntil?: string;
  /**
   * Left by a job's `completed` that came before its `queued` (Gitea delivers from a queue): the
   * job is over, so its late `queued` must provision nothing. Counts as the same assignment as any
   * content offered under its id, and is terminated from the start.
   */
  tombstone?: true;
  /**
   * Where the job comes from, for people looking at the status page (never a secret); its forge
   * ids (job, run, attempt) for a rerun after an interruption (absent in records from before).
   */
  job?: {
    repository: string;
    name?: string;
    id?: number;
    run?: number;
    attempt?: number;
    /** Gitea: the run's branch (workflow_job.head_branch; "" for a pull request's or a tag's run), for the cache's scopes. */
    branch?: string;
    /** Gitea: the repository's default branch (repository.default_branch), for the cache's scopes. */
    defaultBranch?: string;
  };
}

/** Its runner: the identity registered for it, and its boot. */
export interface RunnerPart {
  /** The runner registered for this assignment; its credentials are sealed (AES-256-GCM). */
  runner?: RunnerRef;
  /** When its runner was first asked of the backend, this attempt (a boot is timed from it). */
  askedAt?: string;
  readyAt?: string;
  /**
   * The ack subject of the delivery that asked for its runner (nats/pull.ts): its claim acks that
   * message itself, so no pass has to wait out its nak delay to ack it. Not a secret.
   */
  askedBy?: string;
  /** Runners asked for it before that did not boot within their pool's bootTimeoutMs. */
  bootAttempts?: number;
  /** Its runners never booted (MAX_BOOT_ATTEMPTS): the sweep may publish its job again after a while. */
  gaveUpAt?: string;
  /** A cloud VM of this boot attempt fetched its launch (the one-time bootstrap): it is up and reaches the Worker. */
  launchedAt?: string;
  /** This boot attempt's VM was reported as not fetching its launch in time (once per attempt). */
  launchLate?: true;
}

/** Where it was admitted, and whether its turn came. */
export interface PlacementPart {
  /**
   * The pool that admitted it, and that pool's backend (where its runner runs, which a spilled
   * job's is not the backend whose queue it waits in). Kept from the first admission on: its
   * runner may exist there.
   */
  placement?: { pool: string; backend: Backend };
  /** Its turn in the wait set came (fair share): admitted as it comes, ahead of those still waiting. */
  chosen?: true;
  /**
   * Waiting in the wait set (fair share): the ack subject of its message's latest delivery, which
   * holds it; its turn's verdict goes there (reconcile/give-turn.ts). Not a secret.
   */
  heldBy?: string;
  /**
   * The number of its latest wait in the wait set (fair share): its entry's message id names it,
   * so a job that waits again after its entry was taken out gets a new entry, while a delivery
   * that repeats the same wait (a return from its hold, a pass repeated after it died) adds none.
   */
  waits?: number;
}

/** What a runner's interruption left: the runner replaced before its claim, or the job lost after it. */
export interface InterruptPart {
  /**
   * Runners replaced because their machine was taken back before the claim: part of the
   * incarnation (incarnationOf), so the claim token of a replaced runner is refused.
   */
  replaced?: number;
  /** Its latest runner's interruption: when it was reported, the notice's time, and whether its job had started. */
  interrupted?: Interruption;
}

export interface Interruption {
  at: string;
  /** When the cloud said it takes the machine back (the notice's time). */
  notice: string;
  /** Whether its job had started (the claim came first): then the job is lost with its runner. */
  claimed: boolean;
  /** Who told: the runner's watcher, or the sweep that found the machine ended by its cloud. */
  by: "runner" | "sweep";
}

/** Its runner stands in a pool's warm position. */
export interface WarmPart {
  /**
   * Its runner is kept warm for its pool, waiting for any job: a warm runner's own assignment, or
   * a job's whose runner another runner beat to its job. Its wait for a claim is bounded by the
   * pool's maxIdleMs (pools/maintain.ts replaces it then), not by CLAIM_TIMEOUT_MS.
   */
  warm?: true;
  /** A warm runner by reuse: rebuilt on this parked server of its pool (reuse: "rebuild"). */
  reuse?: { server: number };
  /** Its runner's machine was not made for it: a parked server of its pool rebuilt for it (as its backend said after the ask). */
  made?: "rebuilt";
}

/** How the runner that took a job came (the start-up histogram's split): see startVia. */
export type StartVia = "reuse" | "rebuilt" | "warm" | "new";
export const START_VIAS: readonly StartVia[] = ["reuse", "rebuilt", "warm", "new"];

/**
 * How a claiming runner's record says it came: warm on a finished job's server (warm by reuse), on
 * a parked server rebuilt when a job asked (rebuilt on demand), warm on a new machine, or new.
 */
export function startVia(r: WarmPart): StartVia {
  if (r.reuse) return "reuse";
  if (r.made === "rebuilt") return "rebuilt";
  return r.warm ? "warm" : "new";
}

/** Forgejo: the job handles it is bound to. */
export interface ForgeBindingPart {
  /**
   * The job attempt a warm runner was given (its runner asks for the handle, then runs
   * `one-job --handle`). Not `job`: the warm runner was admitted without one. Its repository is the
   * one the runner counts to (jobRepository): QUOTAS places taken when it was given, fair share,
   * the owner rows and usage.
   */
  bound?: { job: number; attempt: number; handle: string; repository: string; at: string };
  /** Its own job attempt's handle (from the assignment). */
  jobHandle?: string;
}

/** Its runner ran another job than this one (a swap). */
export interface SwapPart {
  /**
   * That job's own assignment id. That assignment's runner serves this one's job in turn (Gitea
   * hands each runner the oldest job it can take).
   */
  took?: string;
}

type NotEnded = { completedAt?: undefined; terminatedAt?: undefined; reason?: undefined; movedTo?: undefined };

/**
 * Where it stands (model/states.ts): each state with what it must have and what it cannot, so
 * that a record claimed without a time, or waiting with an end's reason, cannot be written.
 */
export type Standing =
  | ({ state: "received" | "capacity_wait" | "quota_wait" | "backend_pending" | "backend_ready"; claimedAt?: undefined } & NotEnded)
  | ({ state: "claimed"; claimedAt: string } & NotEnded)
  | { state: "completed"; claimedAt?: string; completedAt: string; terminatedAt?: undefined; reason?: undefined; movedTo?: undefined }
  | {
      state: "terminated";
      claimedAt?: string;
      completedAt?: undefined;
      terminatedAt: string;
      reason: string;
      /**
       * Forgejo: ended while it waited its turn because its job went to this warm runner (move.ts).
       * The one end that is undone: should that runner not take the job, the record waits again.
       */
      movedTo?: string;
    };

/** Every state of the machine has its standing (a compile-time check). */
export const STANDING_COVERS_EVERY_STATE: Exclude<AssignmentState, Standing["state"]> extends never ? true : never = true;

/** An assignment's record: its core, where it stands, and its typed parts. */
export type AssignmentRecord = RecordCore & Standing & RunnerPart & PlacementPart & WarmPart & ForgeBindingPart & SwapPart & InterruptPart;

export interface RunnerRef {
  id: number;
  name: string;
  registeredAt: string;
  /** base64(iv ‖ ciphertext) of the `.runner` JSON, bound to the assignment id. */
  sealed: string;
  /** The scope key it was registered at (gitea/scope.ts), when not GITEA_SCOPE. */
  scope?: string;
  /** Forgejo: the URL and scope it is registered at (forgejo/warm.ts forgejoPlace). */
  place?: string;
}
