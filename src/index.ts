// The Worker: HTTP API and the cron-triggered reconciliation. Reads `env` here and nowhere else.
import { loadConfig } from "./config.ts";
import { createDispatcher } from "./dispatcher.ts";
import { GATEWAY_BINDING, gatewayPath } from "./gateway/client.ts";
import type { NatsGateway } from "./gateway/object.ts";
import { createApp } from "./http/app.ts";
import { directPath } from "./request-path.ts";

// Every export of this module is an entry point to workerd: the handlers and the Durable Object class.
export { NatsGateway } from "./gateway/object.ts";

const dispatcherOf = (env: unknown) => createDispatcher({ config: loadConfig(env as Record<string, unknown>), shareConnection: true });

export const app = createApp({
  dispatcher: dispatcherOf,
  // NATS_GATEWAY=off, or no binding (an account without Durable Objects): each invocation connects.
  path(d, env) {
    const ns = (env as Record<string, unknown>)[GATEWAY_BINDING] as DurableObjectNamespace<NatsGateway> | undefined;
    return d.config.gateway.enabled && ns ? gatewayPath(ns, d) : directPath(d);
  },
});

export default {
  fetch: app.fetch,
  // Cron passes keep a connection of their own (see README, "NATS gateway"): one per tick.
  async scheduled(controller, env, _ctx) {
    const d = dispatcherOf(env);
    try {
      await d.tick(`cron ${controller.cron}`);
    } finally {
      await d.close();
    }
  },
} satisfies ExportedHandler<Record<string, unknown>>;
