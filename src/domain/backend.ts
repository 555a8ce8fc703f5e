import type { Assignment } from "../model/assignment.ts";
import type { RunnerFile } from "./runner-identity.ts";
import type { ForgejoRunnerIdentity } from "./runner-identity.ts";
import type { RunnerRef } from "../state/records.ts";
import { UpstreamError } from "../model/status-error.ts";

/**
 * How a runner program starts in a workload, as its forge says (forge/<name>/launch.ts): the
 * kubernetes and kubevirt drivers render it without knowing which forge it is. It holds the
 * runner's credentials: they go into a Secret, never into a workload's spec.
 */
export interface RunnerLaunch {
  /** The Secret's data (the runner's credentials and the claim token), mounted read-only in a Pod at `mountPath`. */
  files: Record<string, string>;
  mountPath: string;
  /** The runner container's command: no secret in it (arguments reach the shell as "$@"). */
  command: string[];
  /** cloud-init user data for a VM: the files (0600), the runner once, then power off. */
  userData: string;
}

/** What a forge's launch is made from besides the runner's identity. */
export interface LaunchInput {
  claimToken: string;
  completeUrl: string;
  /** Where a runner with no job yet (warm) asks for one. */
  handleUrl?: string | undefined;
  /** The Actions cache for this runner's job, when the Worker serves one (CACHE_BUCKET). */
  cache?: RunnerCache | undefined;
}

/**
 * What a runner's config holds of the Actions cache (docs/cache.md). Gitea: `url` is its
 * cache.external_server, a capability of this runner's own, ending in "/". Forgejo: `url` is
 * its cache.external_server (the Worker's origin, this runner named in the query) and `secret`
 * its cache.secret, this job's own. Secrets both: they go in the runner's Secret, never its spec.
 */
export interface RunnerCache {
  url: string;
  secret?: string;
}

/** A runner request, with the runner registration to store in the record; "busy": another invocation is registering it. */
export type PreparedRequest = { request: RunnerRequest; ref?: RunnerRef } | "busy";

export type RunnerStatus = "ready" | "pending";

export interface RunnerRequest {
  assignment: Assignment;
  /** Lets the runner call the claim and complete endpoints; the only credential it receives. */
  claimToken: string;
  claimUrl: string;
  completeUrl: string;
  /** Where a runner's watcher reports that its machine is being taken back (POST, with its claim token and the notice's time). */
  interruptUrl?: string;
  /** Where a VM fetches its launch once, with a one-time token (POST; the hetzner driver's user_data carries only that). */
  bootstrapUrl?: string;
  /** The runner's identity (act_runner's `.runner` file) when Gitea integration is on. */
  runner?: RunnerFile;
  /** With FORGE=forgejo instead: what `forgejo-runner one-job` starts with, bound to its job's handle. */
  forgejo?: ForgejoRunnerIdentity;
  /** A Forgejo runner with no handle yet (warm): where it asks for one, with its claim token (GET; 204 until given). */
  handleUrl?: string;
  /** How its runner program starts, from its forge (Forge.runnerFields): what the kubernetes and kubevirt drivers render. Never sent by the http driver. */
  launch?: RunnerLaunch;
  /** The Actions cache, for a backend that starts its own runner (the http driver); the others find it in `launch`. */
  cache?: RunnerCache;
  /** The pool the runner is for: its template is merged over the backend's default (RUNNER_POOLS). */
  pool?: {
    name: string;
    template?: Record<string, unknown>;
    /** A cloud driver's placements, tried in order (hetzner: server_type and location; ec2: InstanceType and SubnetId). */
    candidates?: Record<string, string>[];
    reuse?: "rebuild";
    /** With reuse: how long before its paid hour ends a server is given up, not kept for the next job. */
    warmUntil?: number;
    market?: "spot" | "on-demand";
    spotFallback?: "on-demand";
  };
}

/**
 * A runner backend (pod, VM). Every call is idempotent per assignment id: asking twice for one
 * id yields one runner, tearing down twice (or something that never existed) succeeds.
 * Failures throw BackendError; the reconciliation naks and retries.
 */
export interface RunnerBackend {
  accept(request: RunnerRequest, signal: AbortSignal): Promise<RunnerStatus>;
  teardown(id: string, signal: AbortSignal): Promise<void>;
  /** The driver's own work on the cron tick (the hetzner driver's orphan sweep), on the invocation's instance. */
  tick?(ask: TickAsk): Promise<{ deleted: number }>;
  /**
   * The servers a pool with reuse: "rebuild" keeps parked (its jobs done, its paid hour running):
   * each one's id and when its current paid hour ends (epoch ms). Drivers that park nothing have none.
   */
  parked?(pool: string): Promise<ParkedServer[]>;
  /**
   * How the machine of `id`'s last accept (in this isolate) was made, when not new: "rebuilt", a
   * parked server of its pool rebuilt for it. Told once: the pass asks right after the accept.
   */
  made?(id: string): "rebuilt" | undefined;
}

/** A server parked for its pool's next job (RunnerBackend.parked). */
export interface ParkedServer {
  server: number;
  /** Epoch ms its current paid hour ends. */
  paidUntil: number;
}

/** What of a pool a cloud driver places a workload by: its template over the backend's, and its candidates. */
export type PoolPlacement = Pick<NonNullable<RunnerRequest["pool"]>, "name" | "template" | "candidates">;

/** What a driver's tick may ask of the dispatcher. */
export interface TickAsk {
  /** The record of each assignment id that has one: whether it has ended (completed, terminated). */
  records(ids: readonly string[]): Promise<Map<string, { ended: boolean }>>;
  /** Each pool's maxLifetimeMs, by name: a workload of it older than that (and a grace) is removed. */
  lifetimes: ReadonlyMap<string, number>;
  /** The backend's pools, for a driver that checks their placements against what its cloud offers (hetzner's offer.ts); none: its template alone. */
  pools?: readonly PoolPlacement[];
  event(name: "orphan_deleted", fields: { assignment: string; reason: string }): void;
  /** The cloud took back the machine of assignment `id` and nobody told (no watcher): handled as an interruption its runner reported. */
  interrupted?(id: string, notice: string): Promise<void>;
  /** Aborted at `deadline`: a list not read by then deletes nothing. */
  signal: AbortSignal;
  /** Epoch ms by which the tick's work ends: what is judged by then is deleted, each call within its own bound. */
  deadline: number;
  /** One backend call (a delete) within its own time bound and the invocation's connection limit. */
  call<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
}

/** A failed backend call; the reconciliation naks and retries (401/403 also emit backend_auth). */
export class BackendError extends UpstreamError {
  override readonly name: string = "BackendError";
}

/**
 * What the workload was asked for is gone, and nothing else may stand in for it: a warm runner by
 * reuse whose parked server a job took meanwhile (a new server would cost a new hour). Its
 * assignment ends; nothing is retried.
 */
export class WorkloadUnneeded extends BackendError {
  override readonly name = "WorkloadUnneeded";
}

/**
 * The backend refused our credentials or what a variable of ours made it send: not transient, so
 * named by that variable (and, for a template, the pool and field) in /healthz and the event, and
 * retried only slowly. The message holds no secret: a field's value, never a token.
 */
export class BackendRefused extends BackendError {
  override readonly name = "BackendRefused";
  /** What to fix: `HCLOUD_TOKEN`, `RUNNER_POOLS pool "large" candidates[0].server_type`, … */
  readonly variable: string;
  readonly kind: "credentials" | "configuration";
  constructor(message: string, variable: string, kind: "credentials" | "configuration", status?: number) {
    super(message, status);
    this.variable = variable;
    this.kind = kind;
  }
}
