// Starts one nats-server for the whole run; every test isolates itself with unique stream,
// bucket and consumer names, so files can run in parallel against it.
import type { TestProject } from "vitest/node";
import { startNatsServer } from "../../scripts/nats-server.mjs";

declare module "vitest" {
  export interface ProvidedContext {
    natsWsUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startNatsServer();
  project.provide("natsWsUrl", server.wsUrl);
  return async () => {
    await server.stop();
  };
}
