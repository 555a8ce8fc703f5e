// npm run provision: creates or updates the stream, consumers and KV buckets. Idempotent.
// Reads the Worker's variables from the process environment, then `.dev.vars`.
import { ConfigError, loadProvisionConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { isNatsUnavailable, natsHosts, withNats } from "../src/nats/connection.ts";
import { loadEnv } from "./dev-vars.mjs";

let config;
try {
  config = loadProvisionConfig(loadEnv(process.env.DEV_VARS ?? ".dev.vars"));
  const done = await withNats(config, (handle) => provision(handle, config));
  for (const line of done) console.log(line);
} catch (err) {
  if (err instanceof ConfigError) {
    console.error("provision: invalid configuration:\n  " + err.problems.join("\n  "));
  } else if (config && isNatsUnavailable(err)) {
    // Scheme, host and port only: a URL may carry credentials.
    console.error(`provision failed: cannot reach NATS at ${natsHosts(config.natsServers)} (NATS_URL): ${err.message}`);
  } else {
    console.error(`provision failed: ${err?.message ?? err}`);
  }
  process.exit(1);
}
