// Starts one nats-server and one fake runner backend, one fake Gitea and one fake Kubernetes API for the whole run; every test isolates itself with unique stream,
// bucket and consumer names, so files can run in parallel against it.
import type { TestProject } from "vitest/node";
import { startNatsServer } from "../../scripts/nats-server.mjs";
import { startFakeBackend } from "../../scripts/fake-backend.mjs";
import { startFakeGitea } from "../../scripts/fake-gitea.mjs";
import { startFakeForgejo } from "../../scripts/fake-forgejo.mjs";
import { startFakeKubernetes } from "../../scripts/fake-kubernetes.mjs";
import { startFakeHetzner } from "../../scripts/fake-hetzner.mjs";
import { startFakeEc2 } from "../../scripts/fake-ec2.mjs";
import { startWsProxy } from "../../scripts/ws-proxy.mjs";
import { startRestartableNats } from "./restartable-nats.ts";
import { startClusterControl } from "./cluster-control.ts";

declare module "vitest" {
  export interface ProvidedContext {
    natsWsUrl: string;
    backendUrl: string;
    giteaUrl: string;
    forgejoUrl: string;
    kubernetesUrl: string;
    hetznerUrl: string;
    ec2Url: string;
    /** A counting WebSocket proxy to the nats-server: append /<tag>; GET <http>/_counts/<tag>. */
    natsProxyUrl: string;
    /** The same proxy with 100 ms on every frame each way: what was sent is not yet there. */
    natsSlowProxyUrl: string;
    /** A nats-server of its own for the broker-restart suite, and its kill/start control URL. */
    restartNatsWsUrl: string;
    /** A nats-server without JetStream: every KV or stream request has no responders. */
    natsNoJetStreamWsUrl: string;
    /** A 3-node cluster (NATS_URL lists every node) and its kill/start control URL. */
    clusterNatsUrl: string;
    clusterControlUrl: string;
    restartNatsControlUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startNatsServer();
  const backend = await startFakeBackend();
  project.provide("natsWsUrl", server.wsUrl);
  const gitea = await startFakeGitea();
  project.provide("backendUrl", backend.url);
  project.provide("giteaUrl", gitea.url);
  const forgejo = await startFakeForgejo();
  project.provide("forgejoUrl", forgejo.url);
  const kubernetes = await startFakeKubernetes();
  project.provide("kubernetesUrl", kubernetes.url);
  const hetzner = await startFakeHetzner();
  project.provide("hetznerUrl", hetzner.url);
  const ec2 = await startFakeEc2();
  project.provide("ec2Url", ec2.url);
  const proxy = await startWsProxy({ upstream: server.wsUrl });
  project.provide("natsProxyUrl", proxy.url("").replace(/\/$/, ""));
  const slowProxy = await startWsProxy({ upstream: server.wsUrl, delayMs: 100 });
  project.provide("natsSlowProxyUrl", slowProxy.url("slow"));
  const noJetStream = await startNatsServer({ jetstream: false });
  project.provide("natsNoJetStreamWsUrl", noJetStream.wsUrl);
  const restartable = await startRestartableNats();
  // Only the workerd project runs the cluster suites.
  const cluster = project.name === "workerd" ? await startClusterControl(3) : undefined;
  project.provide("clusterNatsUrl", cluster?.natsUrl ?? "");
  project.provide("clusterControlUrl", cluster?.controlUrl ?? "");
  project.provide("restartNatsWsUrl", restartable.wsUrl);
  project.provide("restartNatsControlUrl", restartable.controlUrl);
  return async () => {
    await cluster?.close();
    await restartable.close();
    await noJetStream.stop();
    await proxy.close();
    await slowProxy.close();
    await kubernetes.close();
    await hetzner.close();
    await ec2.close();
    await gitea.close();
    await forgejo.close();
    await backend.close();
    await server.stop();
  };
}
