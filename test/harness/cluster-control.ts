// The 3-node nats-server cluster of the cluster suites, with a control API for the tests inside
// workerd (which cannot spawn processes): POST /kill/<i> (SIGKILL), /shutdown/<i> (SIGTERM),
// /start/<i> (same store and ports); GET /state. Only cluster suites use it, one file at a time.
import { createServer } from "node:http";
import { startNatsCluster } from "../../scripts/nats-cluster.mjs";

export async function startClusterControl(size = 3) {
  const cluster = await startNatsCluster({ size });
  const control = createServer(async (req, res) => {
    const m = /^\/(kill|shutdown|start)\/(\d+)$/.exec(req.url ?? "");
    try {
      if (req.method === "POST" && m && Number(m[2]) < size) {
        const i = Number(m[2]);
        if (m[1] === "kill") await cluster.kill(i);
        else if (m[1] === "shutdown") await cluster.shutdown(i);
        else await cluster.start(i);
      } else if (!(req.method === "GET" && req.url === "/state")) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ nodes: cluster.nodes }));
    } catch (err) {
      res.writeHead(500, { "content-type": "text/plain" }).end(String(err));
    }
  });
  await new Promise<void>((r) => control.listen(0, "127.0.0.1", r));
  const address = control.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    natsUrl: cluster.natsUrl,
    controlUrl: `http://127.0.0.1:${port}`,
    async close() {
      await new Promise((r) => control.close(r));
      await cluster.stop();
    },
  };
}
