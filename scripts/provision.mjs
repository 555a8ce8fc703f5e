// npm run provision: creates or updates the stream, consumers and KV buckets. Idempotent.
// Reads the Worker's own configuration (provision-config.mjs): wrangler.jsonc's vars (of --env
// NAME), then .dev.vars, then the environment.
import { ConfigError, loadProvisionConfig } from "../src/app/config.ts";
import { layoutPlan, provision } from "../src/nats/layout.ts";
import { isNatsUnavailable, NatsAuthRefused, natsHosts, withNats } from "../src/nats/connection.ts";
import { USAGE, describeSources, mergeLayers, provisionArgs, readLayers } from "./provision-config.mjs";

let config;
try {
  const args = provisionArgs(process.argv.slice(2));
  if (args.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const { layers, environments } = readLayers({ config: args.config, env: args.env, devVars: process.env.DEV_VARS });
  const merged = mergeLayers(layers);
  console.log(`provision: reading ${layers.map((l) => l.source).join(", then ")}`);
  if (!args.env && environments.length)
    console.log(`provision: no --env given, so the top level is provisioned; this file also defines env ${environments.join(", ")}`);
  for (const line of describeSources(merged)) console.log(line);
  config = loadProvisionConfig(merged.vars);
  if (args.dryRun) {
    for (const line of layoutPlan(config)) console.log(line);
    console.log("provision: --dry-run: the layout's variables hold; nothing was sent to NATS");
    process.exit(0);
  }
  const done = await withNats(config, (handle) => provision(handle, config));
  for (const line of done) console.log(line);
} catch (err) {
  if (err instanceof ConfigError) {
    console.error("provision: invalid configuration:\n  " + err.problems.join("\n  "));
  } else if (err instanceof NatsAuthRefused) {
    console.error(`provision failed: ${err.message}`);
  } else if (config && isNatsUnavailable(err)) {
    // Scheme, host and port only: a URL may carry credentials.
    console.error(`provision failed: cannot reach NATS at ${natsHosts(config.natsServers)} (NATS_URL): ${err.message}`);
  } else if (String(err?.code).startsWith("ERR_PARSE_ARGS_")) {
    console.error(`provision: ${err.message}\n${USAGE}`);
  } else {
    console.error(`provision failed: ${err?.message ?? err}`);
  }
  process.exit(1);
}
