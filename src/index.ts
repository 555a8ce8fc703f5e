import { wsconnect } from "@nats-io/nats-core";
import { jetstreamManager } from "@nats-io/jetstream";
export default {
  async fetch(req: Request, env: any) {
    const nc = await wsconnect({ servers: env.NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      return Response.json(await jsm.getAccountInfo());
    } finally { await nc.drain(); }
  },
} satisfies ExportedHandler<any>;
