// What `npm run provision` reads, and from where: the `vars` of wrangler.jsonc (of `--env NAME`
// when given, as wrangler itself resolves them), then `.dev.vars` (`.dev.vars.NAME` first, as
// wrangler dev does), then the environment, each overriding the one before. The same file and
// environment the Worker is deployed with, so the layout matches the Worker that will read it.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { parseArgs } from "node:util";
import { unstable_readConfig } from "wrangler";
import { envSchema } from "../src/app/config-schema.ts";
import { natsHosts } from "../src/nats/connection.ts";
import { parseDevVars } from "./dev-vars.mjs";

export const USAGE =
  "usage: ./run provision [--config FILE] [--env NAME] [--dry-run]   (or npm run provision -- …); FILE defaults to wrangler.jsonc; --dry-run checks the configuration and prints the layout without connecting to NATS";

/** `--config PATH` (default wrangler.jsonc, when there), `--env NAME` and `--dry-run`. */
export function provisionArgs(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      config: { type: "string", short: "c" },
      env: { type: "string", short: "e" },
      "dry-run": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  return { config: values.config, env: values.env, dryRun: values["dry-run"] ?? false, help: values.help ?? false };
}

/** Names that hold a secret: shown as set, never by value. */
export const isSecret = (name) => /TOKEN|KEY|PASS|CREDS|SECRET|^NATS_USER$/.test(name);

/**
 * The layers, in the order they apply: `{ source, vars }` each. Only variables the Worker knows
 * are taken from the process environment (it holds PATH and the like too).
 */
export function readLayers({ config, env, devVars, processEnv = process.env, cwd = process.cwd() }) {
  const layers = [];
  const configPath = config ?? (existsSync(join(cwd, "wrangler.jsonc")) ? join(cwd, "wrangler.jsonc") : undefined);
  if (config && !existsSync(config)) throw new Error(`--config ${config}: no such file`);
  if (env && !configPath) throw new Error(`--env ${env} needs a wrangler.jsonc (--config PATH)`);
  let environments = [];
  if (configPath) {
    const named = shortPath(cwd, configPath);
    const unknownEnv = () => new Error(`--env ${env}: ${named} defines no such environment (env.${env})`);
    let read;
    try {
      read = unstable_readConfig({ config: configPath, env }, { hideWarnings: true });
    } catch (err) {
      throw env && /No environment found/.test(String(err?.message)) ? unknownEnv() : err;
    }
    const raw = JSON.parse(JSON.stringify(read.vars ?? {}));
    if (env && !(read.definedEnvironments ?? []).includes(env)) throw unknownEnv();
    environments = read.definedEnvironments ?? [];
    layers.push({ source: env ? `${named} env.${env}` : named, vars: raw });
  }
  const dir = configPath ? dirname(configPath) : cwd;
  const devPath = devVars ?? [env && join(dir, `.dev.vars.${env}`), join(dir, ".dev.vars")].find((p) => p && existsSync(p));
  if (devPath && existsSync(devPath)) layers.push({ source: shortPath(cwd, devPath), vars: parseDevVars(readFileSync(devPath, "utf8")) });
  const known = Object.keys(envSchema.shape);
  const fromEnv = Object.fromEntries(known.filter((k) => processEnv[k] !== undefined && processEnv[k] !== "").map((k) => [k, processEnv[k]]));
  layers.push({ source: "the environment", vars: fromEnv });
  return { layers, environments, configPath };
}

/** The merged variables, and which layer each came from. */
export function mergeLayers(layers) {
  const vars = {};
  const from = {};
  for (const { source, vars: v } of layers) {
    for (const [k, value] of Object.entries(v)) {
      vars[k] = value;
      from[k] = source;
    }
  }
  return { vars, from };
}

/** One line per variable read, known to the Worker: its value (secrets named only) and its source. */
export function describeSources({ vars, from }) {
  const known = new Set(Object.keys(envSchema.shape));
  return Object.keys(vars)
    .filter((k) => known.has(k))
    .sort()
    .map((k) => `  ${k} = ${shown(k, vars[k])}  (${from[k]})`);
}

function shortPath(cwd, path) {
  const rel = relative(cwd, path);
  return rel && !rel.startsWith("..") ? rel : path;
}

function shown(name, value) {
  if (isSecret(name)) return "(secret, not shown)";
  if (name === "NATS_URL")
    return natsHosts(
      String(value)
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean),
    );
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
