// What a new user runs into first: an old Node, a wrong NATS_SERVER_BIN, a NATS_URL nobody
// answers at, a negative capacity. Each must say plainly what is wrong.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../../bench/lib.mjs";
import { findNatsServer } from "../../scripts/nats-server.mjs";
import { startNatsCluster } from "../../scripts/nats-cluster.mjs";
import { createServer } from "node:net";
import { loadConfig } from "../../src/app/config.ts";
import { testEnv } from "../harness/env.ts";
import { fakeMachine, fakeNatsBinary, fakeRepo, type Machine } from "../harness/fake-apt.ts";

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

describe("./run start with a mistake in its configuration", () => {
  /** The command lines of every process running now (Linux's /proc). */
  const commandLines = () =>
    readdirSync("/proc")
      .filter((p) => /^\d+$/.test(p))
      .flatMap((p) => {
        try {
          return [readFileSync(`/proc/${p}/cmdline`, "utf8").replaceAll("\0", " ")];
        } catch {
          return [];
        }
      });

  it.skipIf(!existsSync("/proc/self/cmdline")).each([
    ["CAPACITY_VM", "abc", /^ {2}CAPACITY_VM /m],
    ["RUNNER_POOLS", "[{bad json", /^ {2}RUNNER_POOLS /m],
  ])("%s=%s: one line naming it, no stack trace, and nothing left running", { timeout: 90_000 }, async (name, value, line) => {
    // The embedded nats-server keeps its store under TMPDIR: a private one shows whether any is left.
    const tmp = mkdtempSync(join(tmpdir(), "gdr-start-bad-"));
    try {
      const run = spawnSync("./run", ["start"], {
        encoding: "utf8",
        timeout: 80_000,
        env: { ...process.env, GDR_NO_INSTALL: "1", DEV_VARS: "/nonexistent", TMPDIR: tmp, PORT: String(await freePort()), [name]: value },
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("start: invalid configuration:");
      expect(run.stderr).toMatch(line);
      expect(run.stderr + run.stdout).not.toMatch(/^\s+at /m);
      expect(commandLines().filter((c) => c.includes(tmp))).toEqual([]);
      expect(readdirSync(tmp).filter((f) => f.startsWith("gdr-nats-"))).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

// .ci/env.sh on the machines a new user brings: each finds a nats-server >= 2.11 the way the
// README says, or stops with one message naming the version, how to install it and
// NATS_SERVER_BIN, never a bare apt error.
// The apt machines are built with dpkg-deb and read by the real apt: where there is none (macOS),
// only the machines without apt are.
const HAS_DPKG = spawnSync("dpkg-deb", ["--version"]).status === 0 && spawnSync("apt-get", ["--version"]).status === 0;

describe(".ci/env.sh on a fresh machine", () => {
  const machines: Machine[] = [];
  afterAll(() => machines.forEach((m) => m.cleanup()));
  const machine = (opts: Parameters<typeof fakeMachine>[0]) => {
    const m = fakeMachine(opts);
    machines.push(m);
    return m;
  };
  const ubuntu = (version: string) =>
    machine({
      id: "ubuntu",
      idLike: "debian",
      apt: true,
      sources: (dir) => {
        fakeRepo(join(dir, "mirror"), "noble", version);
        return `deb [trusted=yes] file:${join(dir, "mirror")} noble main\n`;
      },
    });
  const refusal = (stderr: string) => {
    expect(stderr).toContain("cannot find nats-server 2.11 or later (per-message TTL needs it)");
    expect(stderr).toContain("brew install nats-server");
    expect(stderr).toContain("NATS_SERVER_BIN=/path/to/nats-server ./run test");
    expect(stderr).not.toMatch(/^E: /m);
  };

  it.skipIf(!HAS_DPKG)(
    "recent Ubuntu: its own apt offers 2.11 or later, which is taken from its own suites",
    () => {
      const run = ubuntu("2.11.4").source();
      expect(run.stderr).toContain("provisioning nats-server 2.11.4 from this machine's apt sources");
      expect(run.stdout).toContain(`NATS_SERVER_BIN=${run.cache}/nats/usr/sbin/nats-server`);
      expect(run.stdout).toContain("nats-server: v2.11.4");
      expect(run.status).toBe(0);
    },
    60_000,
  );

  it.skipIf(!HAS_DPKG)(
    "older Ubuntu: its own apt offers 2.10, Debian's sid is not tried there, and one message says what to do",
    () => {
      const run = ubuntu("2.10.22").source();
      expect(run.status).not.toBe(0);
      refusal(run.stderr);
      expect(run.stderr).toContain("this machine's apt offers nats-server 2.10.22");
      expect(run.stderr).not.toContain("sid");
      expect(existsSync(join(run.cache, "nats"))).toBe(false);
    },
    60_000,
  );

  it.skipIf(!HAS_DPKG)(
    "Debian: its own suites offer an old one, so Debian's sid from the same mirror gives a recent one",
    () => {
      const m = machine({
        id: "debian",
        apt: true,
        deb822: true,
        sources: (dir) => {
          fakeRepo(join(dir, "mirror"), "bookworm", "2.9.10");
          fakeRepo(join(dir, "mirror"), "sid", "2.12.1");
          return `Types: deb\nURIs: file:${join(dir, "mirror")}\nSuites: bookworm\nComponents: main\nTrusted: yes\n`;
        },
      });
      const run = m.source({ GDR_DEBIAN_APT_OPTS: "trusted=yes" });
      expect(run.stderr).toContain("provisioning nats-server from Debian sid");
      expect(run.stdout).toContain("nats-server: v2.12.1");
      expect(run.status).toBe(0);
    },
    60_000,
  );

  it("no apt (macOS, Alpine, …): one message, naming Homebrew and NATS_SERVER_BIN", () => {
    const run = machine({ id: "alpine", apt: false }).source();
    expect(run.status).not.toBe(0);
    refusal(run.stderr);
    expect(run.stderr).toContain("this machine has no apt");
  }, 60_000);

  it("a nats-server on PATH is taken when recent enough (Homebrew's), passed over when older", () => {
    const m = machine({ id: "alpine", apt: false });
    const onPath = fakeNatsBinary(join(m.dir, "extra-bin"), "2.12.0");
    const run = m.source();
    expect(run.stdout).toContain(`NATS_SERVER_BIN=${onPath}`);
    expect(run.status).toBe(0);
    fakeNatsBinary(join(m.dir, "extra-bin"), "2.10.9");
    const old = m.source();
    expect(old.status).not.toBe(0);
    expect(old.stderr).toContain(`the nats-server on PATH (${onPath}) is 2.10.9`);
    // NATS_SERVER_BIN wins over everything.
    const named = m.source({ NATS_SERVER_BIN: "/opt/nats/nats-server" }, 'echo "NATS_SERVER_BIN=$NATS_SERVER_BIN"');
    expect(named.stdout).toContain("NATS_SERVER_BIN=/opt/nats/nats-server");
  }, 60_000);

  it("Chromium: found on PATH, or one message naming GDR_CHROMIUM; never an apt error", () => {
    const m = machine({ id: "ubuntu", idLike: "debian", apt: true });
    const missing = m.source({ GDR_NO_CHROMIUM: "", NATS_SERVER_BIN: "/x" }, "echo CHROMIUM=$GDR_CHROMIUM");
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toContain("cannot find Chromium or Chrome for the status page's browser test");
    expect(missing.stderr).toContain("sudo snap install chromium");
    expect(missing.stderr).toContain("GDR_CHROMIUM=/path/to/chromium ./run test");
    const found = fakeNatsBinary(join(m.dir, "extra-bin"), "0").replace(/nats-server$/, "chromium");
    execFileSync("cp", ["/bin/true", found]);
    const run = m.source({ GDR_NO_CHROMIUM: "", NATS_SERVER_BIN: "/x" }, "echo CHROMIUM=$GDR_CHROMIUM");
    expect(run.stdout).toContain(`CHROMIUM=${found}`);
    expect(run.status).toBe(0);
  }, 60_000);

  it("./run lists its commands, and a deployment's commands need no local nats-server", () => {
    const m = machine({ id: "alpine", apt: false });
    // ./run --help sources nothing: it works where nothing is provisioned yet.
    const usage = spawnSync("./run", ["--help"], { encoding: "utf8", env: { PATH: `${m.dir}/bin` } as unknown as NodeJS.ProcessEnv });
    expect(usage.status).toBe(0);
    for (const command of ["start", "test", "lint", "typecheck", "provision", "bench", "deploy", "wrangler"])
      expect(usage.stdout).toMatch(new RegExp(`^  ${command} `, "m"));
    // This machine has no nats-server and no apt: what a deployment runs needs neither.
    const cache = m.source({ NATS_SERVER_BIN: "/x" }, "true").cache;
    // Run in this tree: GDR_NO_INSTALL keeps ./run from installing into the node_modules the suite runs from.
    const stamp = () => (existsSync("node_modules/.gdr-installed") ? readFileSync("node_modules/.gdr-installed", "utf8") : "");
    const before = stamp();
    const provision = spawnSync("bash", ["-c", "./run provision --help"], {
      encoding: "utf8",
      env: {
        HOME: m.dir,
        PATH: `${m.dir}/bin`,
        GDR_CACHE: cache,
        GDR_OS_RELEASE: join(m.dir, "os-release"),
        GDR_NO_INSTALL: "1",
      } as unknown as NodeJS.ProcessEnv,
    });
    expect(provision.stderr).not.toContain("installing dependencies");
    expect(stamp()).toBe(before);
    expect(provision.stderr).not.toContain("nats-server");
    expect(provision.stdout).toContain("usage: ./run provision");
    expect(provision.status).toBe(0);
  }, 120_000);
});
