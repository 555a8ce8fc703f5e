// The 3-node nats-server cluster of the cluster suites, with a control API for the tests inside
// workerd (which cannot spawn processes): POST /kill/<i> (SIGKILL), /shutdown/<i> (SIGTERM),
// /start/<i> (same store and ports); GET /state. Only cluster suites use it, one file at a time.
import { startNatsCluster } from "../../scripts/nats-cluster.mjs";
import { startControlServer } from "./control-server.ts";

export async function startClusterControl(size = 3) {
  const cluster = await startNatsCluster({ size });
  const control = await startControlServer(async (method, url) => {
    const m = /^\/(kill|shutdown|start)\/(\d+)$/.exec(url);
    if (method === "POST" && m && Number(m[2]) < size) {
      const i = Number(m[2]);
      if (m[1] === "kill") await cluster.kill(i);
      else if (m[1] === "shutdown") await cluster.shutdown(i);
      else await cluster.start(i);
    } else if (!(method === "GET" && url === "/state")) return undefined;
    return { nodes: cluster.nodes };
  });
  return {
    natsUrl: cluster.natsUrl,
    controlUrl: control.url,
    async close() {
      await control.close();
      await cluster.stop();
    },
  };
}
