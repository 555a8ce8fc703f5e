// Starts a throwaway nats-server cluster on loopback: every node with routes to the others,
// JetStream (temp store) and websocket. Ports are picked free up front, because each node's
// route list must name the others'. Nodes can be killed and restarted on their store and ports.
import { createServer } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { wsconnect } from "@nats-io/nats-core";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsServer } from "./nats-server.mjs";

async function pickFreePort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

/**
 * `freePort` picks each port (a test passes one that returns a taken port first).
 * `extraConfig` goes into every node's configuration (accounts, say).
 * @param {{ size?: number, freePort?: () => Promise<number>, extraConfig?: string }} [options]
 * @returns a cluster: `wsUrls` (one per node), `natsUrl` (comma-separated ws URLs, as NATS_URL),
 * `nodes` ({ name, wsUrl, up }), kill(i), start(i), nodeOf(serverName), stop().
 */
export async function startNatsCluster({ size = 3, freePort = pickFreePort, extraConfig = "" } = {}) {
  const id = randomUUID().slice(0, 6);
  const root = mkdtempSync(join(tmpdir(), "gdr-cluster-"));
  const specs = [];
  const pickPorts = async () => {
    specs.length = 0;
    for (let i = 0; i < size; i++) rmSync(join(root, `n${i + 1}`), { recursive: true, force: true });
    for (let i = 0; i < size; i++) {
      specs.push({
        name: `gdr-${id}-n${i + 1}`,
        store: join(root, `n${i + 1}`),
        ports: { nats: await freePort(), websocket: await freePort() },
        route: await freePort(),
      });
    }
  };
  const configOf = (spec) => `
cluster {
  name: gdr-${id}
  listen: "127.0.0.1:${spec.route}"
  routes: [${specs
    .filter((s) => s !== spec)
    .map((s) => `"nats-route://127.0.0.1:${s.route}"`)
    .join(", ")}]
}`;
  const start = (spec) => startNatsServer({ name: spec.name, storeDir: spec.store, ports: spec.ports, extraConfig: configOf(spec) + extraConfig });
  const servers = await startAll(pickPorts, () => specs.map(start));
  const wsUrls = servers.map((s) => s.wsUrl);
  const cluster = {
    wsUrls,
    natsUrl: wsUrls.join(","),
    nodes: specs.map((spec, i) => ({ name: spec.name, wsUrl: wsUrls[i], up: true })),
    /** SIGKILL node i (its store stays). */
    async kill(i) {
      if (!cluster.nodes[i].up) return;
      cluster.nodes[i].up = false;
      await servers[i].stop({ signal: "SIGKILL", cleanup: false });
    },
    /** SIGTERM node i, as an upgrade's orderly shutdown does (its store stays). */
    async shutdown(i) {
      if (!cluster.nodes[i].up) return;
      cluster.nodes[i].up = false;
      await servers[i].stop({ signal: "SIGTERM", cleanup: false });
    },
    /** Restarts node i on its own store and ports. */
    async start(i) {
      if (cluster.nodes[i].up) return;
      servers[i] = await start(specs[i]);
      cluster.nodes[i].up = true;
    },
    /** Index of the node a server name belongs to (a stream leader, say), or -1. */
    nodeOf: (serverName) => specs.findIndex((s) => s.name === serverName),
    async stop() {
      await Promise.all(servers.map((s, i) => (cluster.nodes[i].up ? s.stop({ cleanup: false }) : undefined)));
      rmSync(root, { recursive: true, force: true });
    },
  };
  await waitForJetStream(wsUrls, { replicas: size });
  return cluster;
}

// A port picked free can be taken by another process (a test's own nats-server, on -1) before
// the node binds it: then every node is stopped and the cluster starts again on fresh ports.
async function startAll(pickPorts, startEach, attempts = 5) {
  for (let attempt = 1; ; attempt++) {
    await pickPorts();
    const started = await Promise.allSettled(startEach());
    const failed = started.find((r) => r.status === "rejected");
    if (!failed) return started.map((r) => r.value);
    await Promise.all(started.filter((r) => r.status === "fulfilled").map((r) => r.value.stop()));
    if (attempt >= attempts || !/address already in use/.test(String(failed.reason?.message))) throw failed.reason;
  }
}

/**
 * Resolves once JetStream answers through every node (routes up, a meta leader elected) and, with
 * `replicas`, once a stream of that many replicas can be placed: the meta leader knows every peer.
 * Before that, provisioning R3 is refused with "no suitable peers for placement" (seen under load).
 */
export async function waitForJetStream(urls, { timeoutMs = 30_000, replicas = 1 } = {}) {
  const deadline = Date.now() + timeoutMs;
  const retrying = async (what, fn) => {
    for (;;) {
      try {
        return await fn();
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms: ${err.message}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  const withJsm = async (url, fn) => {
    const nc = await wsconnect({ servers: [url], timeout: 2_000 });
    try {
      return await fn(await jetstreamManager(nc, { timeout: 2_000 }));
    } finally {
      await nc.close();
    }
  };
  for (const url of urls) await retrying(`JetStream on ${url} did not come up`, () => withJsm(url, (jsm) => jsm.getAccountInfo()));
  if (replicas < 2) return;
  const probe = `gdr_ready_${randomUUID().slice(0, 8)}`;
  await retrying(`the cluster could not place a stream of ${replicas} replicas`, () =>
    withJsm(urls[0], async (jsm) => {
      await jsm.streams.add({ name: probe, subjects: [`${probe}.>`], num_replicas: replicas, storage: "memory" });
      await jsm.streams.delete(probe);
    }),
  );
}
