import type { Assignment } from "../model/assignment.ts";
import type { RunnerFile } from "./runner-identity.ts";
import type { ForgejoRunnerIdentity } from "./forge.ts";
import type { RunnerRef } from "../state/records.ts";
import { UpstreamError } from "../model/status-error.ts";

/** A runner request, with the runner registration to store in the record; "busy": another invocation is registering it. */
export type PreparedRequest = { request: RunnerRequest; ref?: RunnerRef } | "busy";

export type RunnerStatus = "ready" | "pending";

export interface RunnerRequest {
  assignment: Assignment;
  /** Lets the runner call the claim and complete endpoints; the only credential it receives. */
  claimToken: string;
  claimUrl: string;
  completeUrl: string;
  /** The runner's identity (act_runner's `.runner` file) when Gitea integration is on. */
  runner?: RunnerFile;
  /** With FORGE=forgejo instead: what `forgejo-runner one-job` starts with, bound to its job's handle. */
  forgejo?: ForgejoRunnerIdentity;
  /** A Forgejo runner with no handle yet (warm): where it asks for one, with its claim token (GET; 204 until given). */
  handleUrl?: string;
  /** The pool the runner is for: its template is merged over the backend's default (RUNNER_POOLS). */
  pool?: { name: string; template?: Record<string, unknown> };
}

/**
 * A runner backend (pod, VM). Every call is idempotent per assignment id: asking twice for one
 * id yields one runner, tearing down twice (or something that never existed) succeeds.
 * Failures throw BackendError; the reconciliation naks and retries.
 */
export interface RunnerBackend {
  accept(request: RunnerRequest, signal: AbortSignal): Promise<RunnerStatus>;
  teardown(id: string, signal: AbortSignal): Promise<void>;
}

/** A failed backend call; the reconciliation naks and retries (401/403 also emit backend_auth). */
export class BackendError extends UpstreamError {
  override readonly name = "BackendError";
}
