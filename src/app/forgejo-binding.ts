// Reaching the poller object from the Worker: one object per Forgejo URL and scope.
import type { Config } from "./config.ts";
import type { ForgejoPoller } from "./forgejo-poller.ts";
import { pollerName } from "../forge/forgejo/config.ts";

/** The Durable Object namespace of the poller (wrangler.jsonc, durable_objects.bindings). */
export const POLLER_BINDING = "FORGEJO_POLLER_DO";

export const NO_POLLER_BINDING = `FORGE=forgejo needs the Durable Object binding ${POLLER_BINDING} (the poller): add the binding and migration of wrangler.jsonc`;

export { pollerName };

export type PollerNamespace = DurableObjectNamespace<ForgejoPoller>;

export function pollerOf(env: Record<string, unknown>, config: Config): DurableObjectStub<ForgejoPoller> | undefined {
  const ns = env[POLLER_BINDING] as PollerNamespace | undefined;
  if (!ns || !config.forgejo) return undefined;
  return ns.get(ns.idFromName(pollerName(config.forgejo)));
}
