// A second nats-server that tests may crash and bring back: POST <control>/kill sends SIGKILL,
// POST <control>/start restarts it on the same store and ports. Only the broker-restart suite
// uses it, so no other test sees the outage.
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { startNatsServer } from "../../scripts/nats-server.mjs";
import { startControlServer } from "./control-server.ts";

export async function startRestartableNats() {
  let server = await startNatsServer();
  const { storeDir, ports, wsUrl } = server;
  let up = true;
  let kills = 0;
  const control = await startControlServer(async (method, url) => {
    const route = `${method} ${url}`;
    if (!["POST /kill", "POST /start", "GET /state"].includes(route)) return undefined;
    // Idempotent: killing a dead server or starting a running one just reports the state.
    if (route === "POST /kill" && up) {
      up = false;
      kills++;
      await server.stop({ signal: "SIGKILL", cleanup: false });
    } else if (route === "POST /start" && !up) {
      server = await startNatsServer({ storeDir, ports });
      up = true;
    }
    return { up, kills };
  });
  return {
    wsUrl,
    controlUrl: control.url,
    async close() {
      await control.close();
      await server.stop();
      rmSync(dirname(storeDir), { recursive: true, force: true });
    },
  };
}
