// The Gitea part of the configuration that the schema alone cannot check. Reads raw values, so
// that its problems are reported together with every other one.

import { decodeKey } from "../../model/crypto.ts";
import { parsePreviousSecrets } from "../previous-secrets.ts";
import type { Pool } from "../../pools/config.ts";
import type { GiteaScope, RunnerScope } from "./scope.ts";

/** The Gitea integration's settings, validated with the rest of the configuration (config.ts). */
export interface GiteaConfig {
  url: string;
  webhookSecret: string;
  registrationToken: string | undefined;
  apiToken: string | undefined;
  scope: GiteaScope;
  /** Where each job's runner is registered (RUNNER_SCOPE); a pool's own scope wins. */
  runnerScope: RunnerScope;
  runnerNamePrefix: string;
  /** Raw 32-byte AES-256-GCM key sealing runner identities at rest. */
  identityKey: Uint8Array;
  /** RUNNER_IDENTITY_KEY_PREVIOUS and GITEA_WEBHOOK_SECRET_PREVIOUS: still accepted during a rotation, never used to seal. */
  previousIdentityKey?: Uint8Array | undefined;
  previousWebhookSecret?: string | undefined;
  webhookMaxBytes: number;
  jobPages: number;
  cleanupGraceMs: number;
  /** GITEA_VERSION: the release to serve without asking Gitea (release.ts). */
  version?: string | undefined;
}

type Secrets = Pick<GiteaConfig, "webhookSecret" | "registrationToken" | "apiToken" | "identityKey" | "previousIdentityKey" | "previousWebhookSecret">;

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v : undefined);

export function parseGiteaSecrets(raw: Record<string, unknown>, problems: string[]): Secrets | undefined {
  const before = problems.length;
  const webhookSecret = str(raw.GITEA_WEBHOOK_SECRET);
  const registrationToken = str(raw.GITEA_RUNNER_REGISTRATION_TOKEN);
  const apiToken = str(raw.GITEA_API_TOKEN);
  if (!webhookSecret) problems.push("GITEA_WEBHOOK_SECRET is required with GITEA_URL (a secret: wrangler secret put)");
  if (!registrationToken && !apiToken) problems.push("GITEA_RUNNER_REGISTRATION_TOKEN or GITEA_API_TOKEN is required with GITEA_URL");
  const identityKey = decodeKey(str(raw.RUNNER_IDENTITY_KEY));
  if (!identityKey) problems.push("RUNNER_IDENTITY_KEY must be the base64 of 32 random bytes (openssl rand -base64 32)");
  // Parsed with the pools (pools/config.ts).
  if (!str(raw.RUNS_ON_ROUTES) && !str(raw.RUNNER_POOLS)) problems.push("RUNNER_POOLS (or the older RUNS_ON_ROUTES) is required with GITEA_URL");
  const previous = parsePreviousSecrets(raw, problems);
  if (problems.length > before || !identityKey || !webhookSecret) return undefined;
  return { webhookSecret, registrationToken, apiToken, identityKey, ...previous };
}

/**
 * RUNNER_SCOPE and the pools' scopes against the rest: a scope other than GITEA_SCOPE needs the
 * API token (its registration token is fetched), and under owner or repository a pool that keeps
 * warm runners must say where they go (they have no job, so no owner or repository).
 */
export function checkScopes(
  e: { RUNNER_SCOPE: RunnerScope; GITEA_SCOPE: string; GITEA_API_TOKEN?: string | undefined },
  pools: readonly Pool[],
  problems: string[],
): void {
  const mode = e.RUNNER_SCOPE;
  if (mode !== "instance" && !e.GITEA_API_TOKEN)
    problems.push(`RUNNER_SCOPE=${mode} needs GITEA_API_TOKEN: each ${mode}'s registration token is fetched with it`);
  for (const p of pools) {
    const warm = p.minIdle > 0 || (p.schedule ?? []).some((w) => w.minIdle > 0);
    if (mode !== "instance" && warm && !p.scope)
      problems.push(
        `RUNNER_POOLS: pool ${JSON.stringify(p.name)} keeps warm runners, which have no repository yet: set its scope (admin, org:<name>, user:<name> or repo:<owner>/<name>) with RUNNER_SCOPE=${mode}`,
      );
    if (!e.GITEA_API_TOKEN && p.scope && p.scope !== e.GITEA_SCOPE)
      problems.push(
        `RUNNER_POOLS: pool ${JSON.stringify(p.name)} has scope ${p.scope}, whose registration token is fetched with GITEA_API_TOKEN, which is not set`,
      );
  }
}
