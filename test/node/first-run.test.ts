// What a new user runs into first: an old Node, a wrong NATS_SERVER_BIN, a NATS_URL nobody
// answers at, a negative capacity. Each must say plainly what is wrong.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { freePort } from "../../bench/lib.mjs";
import { findNatsServer } from "../../scripts/nats-server.mjs";
import { startNatsCluster } from "../../scripts/nats-cluster.mjs";
import { createServer } from "node:net";
import { loadConfig } from "../../src/app/config.ts";
import { testEnv } from "../harness/env.ts";

const { tooOld } = createRequire(import.meta.url)("../../scripts/check-node.cjs") as { tooOld: (v: string) => boolean };

describe("first run", () => {
  it("Node older than 22.12 is refused by version, and npm's scripts say so in one line", () => {
    for (const v of ["v20.20.2", "v22.11.9", "v21.99.0", "v8.0.0", "garbage"]) expect(tooOld(v), v).toBe(true);
    for (const v of ["v22.12.0", "v22.23.3", "v23.0.0", "v24.1.0"]) expect(tooOld(v), v).toBe(false);
    // The machine's own Node, when it is an old one, as a new user would meet it.
    const system = "/usr/bin/node";
    if (!existsSync(system) || !tooOld(execFileSync(system, ["--version"], { encoding: "utf8" }).trim())) return;
    for (const script of ["start", "test", "provision"]) {
      const run = spawnSync(system, ["/usr/lib/node_modules/npm/bin/npm-cli.js", "run", script], {
        encoding: "utf8",
        env: { PATH: "/usr/bin:/bin" } as unknown as NodeJS.ProcessEnv,
      });
      expect(run.status, script).not.toBe(0);
      const ours = run.stderr.split("\n").filter((l) => l.includes("gitea-edge-dispatcher needs"));
      expect(ours, script).toEqual([expect.stringMatching(/needs Node\.js >= 22\.12, and this is v\d+\.\d+\.\d+: use `\.\/run start` or `\.\/run test`/)]);
      expect(run.stderr + run.stdout).not.toContain("ERR_UNKNOWN_FILE_EXTENSION");
    }
  });

  it(".ci/env.sh takes the Debian mirror only from the machine's apt sources, and says so clearly when there is none", () => {
    const cache = mkdtempSync(join(tmpdir(), "gdr-env-"));
    const emptyEtc = mkdtempSync(join(tmpdir(), "gdr-apt-"));
    try {
      // Node is there already; nats-server is not, and apt names no mirror.
      symlinkSync(join(process.env.GDR_CACHE ?? join(homedir(), ".cache", "gdr"), "node22"), join(cache, "node22"));
      const run = spawnSync("bash", ["-c", ". .ci/env.sh"], {
        encoding: "utf8",
        env: { ...process.env, GDR_CACHE: cache, GDR_APT_ETC: emptyEtc, NATS_SERVER_BIN: "", GDR_CHROMIUM: "/bin/true" },
      });
      expect(run.status).not.toBe(0);
      expect(run.stderr).toContain("cannot provision nats-server: this machine's apt sources name no Debian mirror");
      expect(existsSync(join(cache, "nats"))).toBe(false);
    } finally {
      rmSync(cache, { recursive: true, force: true });
      rmSync(emptyEtc, { recursive: true, force: true });
    }
  });

  it("a NATS_SERVER_BIN that is not a nats-server is an error naming it, not a fallback", () => {
    expect(() => findNatsServer({ ...process.env, NATS_SERVER_BIN: "/nonexistent/nats-server" })).toThrow(
      /^NATS_SERVER_BIN=\/nonexistent\/nats-server is not an executable file/,
    );
    expect(() => findNatsServer({ ...process.env, NATS_SERVER_BIN: "/bin/true" })).toThrow(/^NATS_SERVER_BIN=\/bin\/true is not a nats-server/);
    const real = findNatsServer({ ...process.env, NATS_SERVER_BIN: "" });
    expect(findNatsServer({ ...process.env, NATS_SERVER_BIN: real })).toBe(real);
  });

  it("provision names the URL (scheme, host, port) it could not reach, and never its credentials", async () => {
    const port = await freePort();
    const run = spawnSync(process.execPath, ["scripts/provision.mjs"], {
      encoding: "utf8",
      env: { ...process.env, DEV_VARS: "/nonexistent", NATS_URL: `ws://admin:hunter2@127.0.0.1:${port}/?token=abc`, TRUST_DOMAIN: "t.local" },
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(`provision failed: cannot reach NATS at ws://127.0.0.1:${port} (NATS_URL)`);
    expect(run.stderr).not.toMatch(/hunter2|admin|abc/);
  });

  it("a cluster whose picked port is taken before a node binds it starts again on fresh ports", async () => {
    // As when another suite's nats-server is given that port by the kernel: CI failed this way.
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", () => r()));
    const takenPort = (taken.address() as { port: number }).port;
    let picks = 0;
    const cluster = await startNatsCluster({ size: 3, freePort: async () => (picks++ === 1 ? takenPort : freePort()) });
    try {
      expect(picks).toBeGreaterThan(9);
      expect(cluster.wsUrls).toHaveLength(3);
      expect(cluster.wsUrls.join()).not.toContain(`:${takenPort}`);
    } finally {
      await cluster.stop();
      taken.close();
    }
  }, 60_000);

  it("a negative capacity says non-negative", () => {
    const problems = (env: Record<string, unknown>) => {
      try {
        loadConfig(testEnv("ws://127.0.0.1:1", "http://127.0.0.1:1", env));
        return [];
      } catch (err) {
        return (err as { problems: string[] }).problems;
      }
    };
    expect(problems({ CAPACITY_POD: "-1" })).toContain("CAPACITY_POD must be non-negative (0 or more)");
    expect(problems({ CAPACITY_VM: "-5" })).toContain("CAPACITY_VM must be non-negative (0 or more)");
    expect(problems({ CAPACITY_POD: "1.5" })).toContain("CAPACITY_POD must be an integer");
    expect(problems({ CAPACITY_POD: "10001" })).toContain("CAPACITY_POD must be at most 10000");
    expect(problems({ CAPACITY_POD: "0" }).filter((p) => p.startsWith("CAPACITY_POD"))).toEqual([]);
  });
});
