// The Worker: HTTP API and the cron-triggered reconciliation. Reads `env` here and nowhere else.
import { loadConfig } from "./config.ts";
import { createDispatcher } from "./dispatcher.ts";
import { createApp } from "./http/app.ts";

const dispatcherOf = (env: unknown) => createDispatcher({ config: loadConfig(env as Record<string, unknown>), shareConnection: true });

export const app = createApp({ dispatcher: dispatcherOf });

export default {
  fetch: app.fetch,
  async scheduled(controller, env, _ctx) {
    const d = dispatcherOf(env);
    try {
      await d.tick(`cron ${controller.cron}`);
    } finally {
      await d.close();
    }
  },
} satisfies ExportedHandler<Record<string, unknown>>;
