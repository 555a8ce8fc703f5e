// A second nats-server that tests may crash and bring back: POST <control>/kill sends SIGKILL,
// POST <control>/start restarts it on the same store and ports. Only the broker-restart suite
// uses it, so no other test sees the outage.
import { rmSync } from "node:fs";
import { createServer } from "node:http";
import { dirname } from "node:path";
import { startNatsServer } from "../../scripts/nats-server.mjs";

export async function startRestartableNats() {
  let server = await startNatsServer();
  const { storeDir, ports, wsUrl } = server;
  let up = true;
  let kills = 0;
  const control = createServer(async (req, res) => {
    const route = `${req.method} ${req.url}`;
    if (!["POST /kill", "POST /start", "GET /state"].includes(route)) {
      res.writeHead(404).end();
      return;
    }
    try {
      // Idempotent: killing a dead server or starting a running one just reports the state.
      if (route === "POST /kill" && up) {
        up = false;
        kills++;
        await server.stop({ signal: "SIGKILL", cleanup: false });
      } else if (route === "POST /start" && !up) {
        server = await startNatsServer({ storeDir, ports });
        up = true;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ up, kills }));
    } catch (err) {
      res.writeHead(500, { "content-type": "text/plain" }).end(String(err));
    }
  });
  await new Promise<void>((r) => control.listen(0, "127.0.0.1", r));
  const address = control.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    wsUrl,
    controlUrl: `http://127.0.0.1:${port}`,
    async close() {
      await new Promise((r) => control.close(r));
      await server.stop();
      rmSync(dirname(storeDir), { recursive: true, force: true });
    },
  };
}
