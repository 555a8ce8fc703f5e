// Which Gitea release a deployment talks to, where it matters (a delivery's assignment id, the
// sweep, reruns): GITEA_VERSION when the operator pins it, else GET /api/v1/version, kept per
// Gitea URL for a while in the isolate (a plain value: it outlives the request that read it).
// A Gitea that cannot be asked keeps the last release read; one never read is served as the
// newest known release, with an event, never refused: a delivery is not retried by Gitea.
import type { Basics } from "../../domain/context.ts";
import type { GiteaClient } from "./client.ts";
import { NEWEST_KNOWN_MINOR, releaseOf, type GiteaRelease } from "./versions.ts";

/** How long a release read from Gitea is kept; an upgrade of Gitea is seen this late at most. */
export const RELEASE_TTL_MS = 10 * 60_000;
/** After a failed read, how long the fallback stands before Gitea is asked again. */
const RETRY_MS = 60_000;

interface Kept {
  release: GiteaRelease;
  until: number;
}

const kept = new Map<string, Kept>();

type Deps = Basics & { config: { gitea?: { url: string; version?: string | undefined } | undefined } };

/** The release of the configured Gitea (GITEA_VERSION or its own word), read at most once per RELEASE_TTL_MS per isolate. */
export async function giteaRelease(d: Deps, client: Pick<GiteaClient, "version"> | undefined): Promise<GiteaRelease> {
  const cfg = d.config.gitea;
  if (cfg?.version) return releaseOf(cfg.version);
  const key = cfg?.url ?? "";
  const now = d.now();
  const entry = kept.get(key);
  if (entry && now < entry.until) return entry.release;
  let release: GiteaRelease;
  try {
    if (!client) throw new Error("no Gitea client");
    release = releaseOf(await client.version());
    kept.set(key, { release, until: now + RELEASE_TTL_MS });
  } catch (err) {
    // The last one read stands; else the newest known, said once per retry.
    release = entry?.release ?? {
      version: "unknown",
      numbering: "per-run",
      reruns: "new-job",
      unknown: `Gitea's version could not be read (${(err as Error).message}): served as 1.${NEWEST_KNOWN_MINOR}`,
    };
    kept.set(key, { release, until: now + RETRY_MS });
  }
  if (release.unknown && !entry?.release.unknown)
    d.sink.event({ event: "gitea_version_unknown", assignment: "-", backend: undefined, reason: release.unknown });
  return release;
}

/** Forgets every kept release (tests that change a fake Gitea's version under one URL). */
export function forgetReleases(): void {
  kept.clear();
}
