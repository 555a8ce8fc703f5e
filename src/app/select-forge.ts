// The forge of a configuration (FORGE): Gitea's or Forgejo's implementation of the Forge interface.
import type { Config } from "./config.ts";
import type { Context } from "../domain/context.ts";
import { createForgejoClient, type ForgejoClient } from "../forge/forgejo/client.ts";
import { createForgejoForge } from "../forge/forgejo/forge.ts";
import type { GiteaClient } from "../forge/gitea/client.ts";
import { createGiteaForge } from "../forge/gitea/forge.ts";
import type { Forge } from "../domain/forge.ts";
import type { EventSink } from "../model/events.ts";

/** `forgejo`: a client to use instead of one on fetch (tests); `timeoutMs`: a caller's tighter bound on each call. */
export function createForge(
  config: Config,
  gitea: GiteaClient | undefined,
  now: () => number,
  forgejo?: ForgejoClient,
  timeoutMs = Infinity,
  sink?: EventSink,
): Forge<Context> | undefined {
  if (config.gitea && gitea) return createGiteaForge(config.gitea, gitea, now);
  const f = config.forgejo;
  if (!f) return undefined;
  return createForgejoForge(
    f,
    forgejo ?? createForgejoClient({ url: f.url, apiToken: f.apiToken, timeoutMs: Math.min(config.backendTimeoutMs, timeoutMs) }),
    now,
    sink,
  );
}
