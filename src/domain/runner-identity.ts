// What both forges' runners share: their names (the assignment they serve, as a claim only) and
// their credentials sealed at rest (AES-256-GCM, bound to the assignment id), so that every retry
// reuses one registration: a Gitea `.runner` file, or a Forgejo runner's `{uuid, token}`.
import { assignmentIdSchema } from "../model/assignment.ts";
import { openJson, sealJson } from "../model/crypto.ts";

/** act_runner's `.runner` file. */
export interface RunnerFile {
  WARNING: string;
  id: number;
  uuid: string;
  name: string;
  token: string;
  address: string;
  labels: string[];
  ephemeral: boolean;
}

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

export function runnerName(prefix: string, assignmentId: string): string {
  return `${prefix}-${assignmentId}`;
}

/**
 * The assignment id a runner's name points at, or undefined when the name is not of our form
 * (anybody's runner, or a name whose tail is no valid assignment id). A name is only a claim:
 * who the runner is, is its Gitea id, checked against the assignment's record.
 */
export function assignmentOfRunner(prefix: string, name: string | undefined): string | undefined {
  if (!name?.startsWith(`${prefix}-`)) return undefined;
  const id = assignmentIdSchema.safeParse(name.slice(prefix.length + 1));
  return id.success ? id.data : undefined;
}

/** Seals a runner's credentials (AES-256-GCM, bound to the assignment id): a Gitea `.runner` file, or a Forgejo runner's. */
export function sealIdentity(key: Uint8Array, assignmentId: string, file: object): Promise<string> {
  return sealJson(key, assignmentId, file);
}

/**
 * Opens an identity sealed under `key`, or under `previous` (RUNNER_IDENTITY_KEY_PREVIOUS): the
 * identities of runners sealed before a rotation stay readable until it is removed.
 */
export function openIdentity<T = RunnerFile>(key: Uint8Array, assignmentId: string, sealed: string, previous?: Uint8Array): Promise<T> {
  return openJson<T>(key, assignmentId, sealed, previous);
}
