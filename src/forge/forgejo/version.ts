// Which Forgejo answers: read once per isolate (at its first /healthz) and again every few minutes.
// Forgejo before 15 has no job handles and no REST-registered ephemeral runners: /healthz says so,
// with the fix; requests are served all the same.
import type { ForgejoClient } from "./client.ts";

export const MIN_FORGEJO_MAJOR = 15;
const RECHECK_MS = 10 * 60_000;

/** A problem for /healthz, or undefined when the version is one we support. Pure. */
export function versionProblem(version: string): string | undefined {
  const major = /^v?(\d+)\./.exec(version.trim())?.[1];
  if (major !== undefined && Number(major) >= MIN_FORGEJO_MAJOR) return undefined;
  const looksGitea = major === "1";
  return `Forgejo ${JSON.stringify(version)} is not supported: FORGE=forgejo needs Forgejo ${MIN_FORGEJO_MAJOR} or newer (job handles, ephemeral runners over REST) and forgejo-runner 12.8 or newer. Upgrade Forgejo${looksGitea ? ", or set FORGE=gitea if this is Gitea" : ""}`;
}

const kept = new Map<string, { at: number; answer: Promise<{ version?: string; problem?: string }> }>();

/** The version and its problem, kept per Forgejo URL for RECHECK_MS. An unreachable Forgejo is a problem too, not kept. */
export function forgejoVersion(url: string, client: Pick<ForgejoClient, "version">, now = Date.now()): Promise<{ version?: string; problem?: string }> {
  const entry = kept.get(url);
  if (entry && now - entry.at < RECHECK_MS) return entry.answer;
  const answer = client.version().then(
    (version) => {
      const problem = versionProblem(version);
      return { version, ...(problem ? { problem } : {}) };
    },
    (err: unknown) => {
      kept.delete(url);
      return { problem: `Forgejo's version could not be read: ${(err as Error).message}` };
    },
  );
  kept.set(url, { at: now, answer });
  return answer;
}
