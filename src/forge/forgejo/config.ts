// FORGE=forgejo: which of the Gitea variables apply, and what Forgejo needs beyond them. Reads raw
// values, so that its problems are reported together with every other one.
import type { Pool } from "../../pools/config.ts";
import { decodeKey } from "../../model/crypto.ts";
import { parsePreviousSecrets } from "../previous-secrets.ts";
import type { ForgejoScope } from "./client.ts";

/** The Forgejo integration's settings (FORGE=forgejo), validated with the rest of the configuration. */
export interface ForgejoConfig {
  /** GITEA_URL: the Forgejo instance. */
  url: string;
  /** GITEA_API_TOKEN: lists the scope's jobs, registers and deletes runners. */
  apiToken: string;
  /** GITEA_SCOPE: where jobs are listed and runners registered. */
  scope: ForgejoScope;
  runnerNamePrefix: string;
  /** GITEA_WEBHOOK_SECRET: checks `action_run_*` deliveries (X-Forgejo-Signature); none: the route is off. */
  webhookSecret: string | undefined;
  /** RUNNER_IDENTITY_KEY: seals each runner's `{uuid, token}` at rest. */
  identityKey: Uint8Array;
  /** RUNNER_IDENTITY_KEY_PREVIOUS and GITEA_WEBHOOK_SECRET_PREVIOUS: still accepted during a rotation, never used to seal. */
  previousIdentityKey?: Uint8Array | undefined;
  previousWebhookSecret?: string | undefined;
  /** FORGEJO_POLL_MS: the poller's period. */
  pollMs: number;
  webhookMaxBytes: number;
  /** CLEANUP_GRACE_MS: a runner of ours no assignment needs is deleted this long after its claim timeout. */
  cleanupGraceMs: number;
}

/** The Gitea variables that mean nothing to Forgejo: each is an error when set, naming why. */
const NOT_FOR_FORGEJO: Record<string, string> = {
  GITEA_RUNNER_REGISTRATION_TOKEN: "Forgejo runners are registered over REST with GITEA_API_TOKEN",
  RUNNER_SCOPE: "each Forgejo runner is bound to its own job by its handle, and registered at its job's repository where the token may",
};

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v.trim() : undefined);

/** The poller object's name: one object per Forgejo URL and scope (binding.ts, object.ts). */
export function pollerName(f: Pick<ForgejoConfig, "url" | "scope">): string {
  return `forgejo-poller:${f.url}:${JSON.stringify(f.scope)}`;
}

/** GITEA_SCOPE (already checked by its schema) as a Forgejo scope. */
export function parseForgejoScope(text: string): ForgejoScope {
  const [kind, rest = ""] = text.split(/:(.*)/s);
  if (kind === "org") return { kind: "org", org: rest };
  if (kind === "repo") {
    const [owner = "", repo = ""] = rest.split("/");
    return { kind: "repo", owner, repo };
  }
  return kind === "user" ? { kind: "user" } : { kind: "admin" };
}

/** The repository scope of a job's repository; undefined when only its ids are known (`id-<n>`). */
export function repositoryScope(repository: string | undefined): (ForgejoScope & { kind: "repo" }) | undefined {
  const [owner, repo] = repository?.split("/") ?? [];
  if (!owner || !repo || /^id-\d+$/.test(repo)) return undefined;
  return { kind: "repo", owner, repo };
}

/** Where a runner of ours is registered: its record's scope, else GITEA_SCOPE. */
export function runnerScope(cfg: Pick<ForgejoConfig, "scope">, runner: { scope?: string | undefined }): ForgejoScope {
  return runner.scope ? parseForgejoScope(runner.scope) : cfg.scope;
}

export function parseForgejoConfig(
  raw: Record<string, unknown>,
  e: {
    GITEA_URL?: string | undefined;
    GITEA_SCOPE: string;
    RUNNER_NAME_PREFIX: string;
    FORGEJO_POLL_MS: number;
    WEBHOOK_MAX_BYTES: number;
    CLEANUP_GRACE_MS: number;
  },
  pools: readonly Pool[],
  problems: string[],
): ForgejoConfig | undefined {
  const before = problems.length;
  if (!e.GITEA_URL) problems.push("GITEA_URL is required with FORGE=forgejo (the Forgejo instance's URL)");
  const apiToken = str(raw.GITEA_API_TOKEN);
  if (!apiToken)
    problems.push("GITEA_API_TOKEN is required with FORGE=forgejo: it lists the scope's waiting jobs and registers runners (a secret: wrangler secret put)");
  for (const [name, why] of Object.entries(NOT_FOR_FORGEJO)) if (str(raw[name])) problems.push(`${name} does not apply with FORGE=forgejo: ${why}; unset it`);
  const identityKey = decodeKey(str(raw.RUNNER_IDENTITY_KEY));
  if (!identityKey) problems.push("RUNNER_IDENTITY_KEY must be the base64 of 32 random bytes (openssl rand -base64 32)");
  if (!str(raw.RUNS_ON_ROUTES) && !str(raw.RUNNER_POOLS)) problems.push("RUNNER_POOLS (or the older RUNS_ON_ROUTES) is required with FORGE=forgejo");
  if (raw.POD_DRIVER === "kubernetes" && !str(raw.RUNNER_IMAGE))
    problems.push(
      "RUNNER_IMAGE is required with FORGE=forgejo and POD_DRIVER=kubernetes: an image with forgejo-runner 12.8 or newer (the default is act_runner's)",
    );
  for (const p of pools) {
    if (p.scope)
      problems.push(
        `RUNNER_POOLS: pool ${JSON.stringify(p.name)} has a scope, which does not apply with FORGE=forgejo (runners are registered at GITEA_SCOPE and bound to their job by handle)`,
      );
  }
  const previous = parsePreviousSecrets(raw, problems);
  if (problems.length > before || !apiToken || !identityKey || !e.GITEA_URL) return undefined;
  return {
    ...previous,
    url: e.GITEA_URL,
    apiToken,
    scope: parseForgejoScope(e.GITEA_SCOPE),
    runnerNamePrefix: e.RUNNER_NAME_PREFIX,
    webhookSecret: str(raw.GITEA_WEBHOOK_SECRET),
    identityKey,
    pollMs: e.FORGEJO_POLL_MS,
    webhookMaxBytes: e.WEBHOOK_MAX_BYTES,
    cleanupGraceMs: e.CLEANUP_GRACE_MS,
  };
}
