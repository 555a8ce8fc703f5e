// The Worker: HTTP API and the cron-triggered reconciliation. Reads `env` here and nowhere else.
import { loadConfig, type Config } from "./app/config.ts";
import { createDispatcher } from "./app/dispatcher.ts";
import { GATEWAY_BINDING, gatewayPath } from "./gateway/client.ts";
import type { NatsGateway } from "./gateway/object.ts";
import { createApp } from "./http/app.ts";
import { directPath } from "./app/request-path.ts";
import { NO_POLLER_BINDING, pollerOf } from "./app/forgejo-binding.ts";
import { tickCache } from "./app/cache-site.ts";

// Every export of this module is an entry point to workerd: the handlers and the Durable Object class.
export { NatsGateway } from "./gateway/object.ts";
export { ForgejoPoller } from "./app/forgejo-poller.ts";

const NO_BINDING = `NATS_GATEWAY=on, but the Durable Object binding ${GATEWAY_BINDING} is missing: each request opens its own NATS connection. Add the binding and migration of wrangler.jsonc, or set NATS_GATEWAY=off`;

// workerd hands every request of an isolate the same env object: its config is parsed once.
const configs = new WeakMap<object, Config>();
function configOf(env: Record<string, unknown>): Config {
  let config = configs.get(env);
  if (!config) configs.set(env, (config = loadConfig(env)));
  return config;
}

const dispatcherOf = (env: unknown) => createDispatcher({ config: configOf(env as Record<string, unknown>), shareConnection: true });

export const app = createApp({
  dispatcher: dispatcherOf,
  // NATS_GATEWAY=off, or no binding (an account without Durable Objects): each invocation connects.
  path(d, env) {
    const ns = (env as Record<string, unknown>)[GATEWAY_BINDING] as DurableObjectNamespace<NatsGateway> | undefined;
    if (!d.config.gateway.enabled) return directPath(d);
    return ns ? gatewayPath(ns, d) : { ...directPath(d), degraded: NO_BINDING };
  },
});

export default {
  fetch: app.fetch,
  // Cron passes keep a connection of their own (see docs/architecture.md, "NATS gateway"): one per tick.
  async scheduled(controller, env, _ctx) {
    const d = dispatcherOf(env);
    try {
      if (d.config.forgejo) await armPoller(env, d);
      await d.tick(`cron ${controller.cron}`);
      await tickCache(d, env);
    } finally {
      await d.close();
    }
  },
} satisfies ExportedHandler<Record<string, unknown>>;

/** The cron tick makes sure the Forgejo poller's alarm is set (an eviction or a deploy may have lost it). */
async function armPoller(env: Record<string, unknown>, d: ReturnType<typeof dispatcherOf>): Promise<void> {
  const poller = pollerOf(env, d.config);
  if (!poller) return d.sink.error(NO_POLLER_BINDING);
  try {
    if (await poller.arm(d.config))
      d.sink.event({
        event: "poller_armed",
        assignment: "-",
        backend: undefined,
        reason: "set the Forgejo poller's alarm (routine on the first tick after a deploy)",
      });
  } catch (err) {
    d.sink.error("arming the forgejo poller failed", { reason: (err as Error).message });
  }
}
