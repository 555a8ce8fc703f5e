// Starts a throwaway nats-server (JetStream + websocket on loopback, ephemeral ports, temp store).
// Shared by the test harness, `npm start` and the benchmark; plain JS so Node runs it as is.
import { spawn, execFileSync } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join, delimiter } from "node:path";
import { randomUUID } from "node:crypto";

/**
 * Finds nats-server: NATS_SERVER_BIN, then PATH, then where `.ci/env.sh` puts it. Throws with
 * install advice when missing. A NATS_SERVER_BIN that is set must be a nats-server: a wrong one is
 * an error, never a silent fallback to another binary.
 */
export function findNatsServer(env = process.env) {
  const fromEnv = env.NATS_SERVER_BIN;
  if (fromEnv) {
    const fix = "fix or unset it (unset, nats-server is taken from PATH or ~/.cache/gdr)";
    try {
      accessSync(fromEnv, constants.X_OK);
    } catch {
      throw new Error(`NATS_SERVER_BIN=${fromEnv} is not an executable file: ${fix}`);
    }
    let version = "";
    try {
      version = natsServerVersion(fromEnv);
    } catch {
      // handled below
    }
    if (!/^nats-server: v\d/.test(version)) throw new Error(`NATS_SERVER_BIN=${fromEnv} is not a nats-server (\`--version\` did not say so): ${fix}`);
    return fromEnv;
  }
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir, "nats-server");
    if (dir && existsSync(candidate)) return candidate;
  }
  const cached = join(env.GDR_CACHE ?? join(homedir(), ".cache", "gdr"), "nats", "usr", "sbin", "nats-server");
  if (existsSync(cached)) return cached;
  throw new Error(
    "nats-server not found: set NATS_SERVER_BIN or put it on PATH. " +
      "`. .ci/env.sh` installs a current one into ~/.cache/gdr without touching the system " +
      "(or: https://docs.nats.io/running-a-nats-service/introduction/installation).",
  );
}

export function natsServerVersion(bin = findNatsServer()) {
  return execFileSync(bin, ["--version"], { encoding: "utf8", timeout: 10_000, stdio: ["ignore", "pipe", "ignore"] }).trim();
}

/**
 * Starts nats-server and resolves once both listeners are up.
 * `storeDir` reuses a store (a restart); `ports` pins the ports of a restart.
 * `name` pins the server name (a cluster member keeps its identity across restarts).
 * `jetstream: false` starts a server without JetStream (every JetStream request has no responders).
 * @param {{ storeDir?: string, ports?: { nats: number, websocket: number }, extraConfig?: string, name?: string, jetstream?: boolean }} [options]
 */
export async function startNatsServer({ storeDir, ports, extraConfig = "", name = `gdr-${randomUUID().slice(0, 8)}`, jetstream = true } = {}) {
  const bin = findNatsServer();
  const dir = mkdtempSync(join(tmpdir(), "gdr-nats-"));
  const store = storeDir ?? join(dir, "store");
  const config = `
server_name: ${name}
listen: "127.0.0.1:${ports?.nats ?? -1}"
ports_file_dir: "${dir}"
${jetstream ? `jetstream { store_dir: "${store}" }` : ""}
websocket { listen: "127.0.0.1:${ports?.websocket ?? -1}", no_tls: true }
${extraConfig}
`;
  writeFileSync(join(dir, "nats.conf"), config);
  const child = spawn(bin, ["-c", join(dir, "nats.conf")], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr.on("data", (chunk) => {
    log = (log + chunk).slice(-8000);
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const deadline = Date.now() + 30_000;
  let found;
  while (!found) {
    if (child.exitCode !== null) throw new Error(`nats-server exited: ${log}`);
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`nats-server did not start in 30s: ${log}`);
    }
    const file = readdirSync(dir).find((f) => f.endsWith(".ports"));
    if (file) {
      const parsed = JSON.parse(readFileSync(join(dir, file), "utf8") || "{}");
      if (parsed.websocket?.length && parsed.nats?.length) found = parsed;
    }
    if (!found) await new Promise((r) => setTimeout(r, 25));
  }
  const port = (url) => Number(new URL(url).port);
  const server = {
    name,
    storeDir: store,
    wsUrl: found.websocket[0].replace(/^ws:\/\/[^:]+:/, "ws://127.0.0.1:"),
    natsUrl: found.nats[0],
    ports: { nats: port(found.nats[0]), websocket: port(found.websocket[0]) },
    pid: child.pid,
    log: () => log,
    /** SIGKILL (a crash) or SIGTERM (graceful); keeps the store unless `cleanup`. */
    async stop({ signal = "SIGTERM", cleanup = true } = {}) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
      if (cleanup) rmSync(dir, { recursive: true, force: true });
    },
  };
  return server;
}
