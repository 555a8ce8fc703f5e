// Fake machines for .ci/env.sh: apt repositories on file: URIs (real apt reads them), holding a
// nats-server package of a chosen version whose binary only says its version; an os-release; and a
// PATH with or without apt. Built with dpkg-deb, so the apt path is the real one.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync, existsSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";

/** A nats-server binary that answers --version with `version`. */
export function fakeNatsBinary(dir: string, version: string): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, "nats-server");
  writeFileSync(path, `#!/bin/sh\necho "nats-server: v${version}"\n`);
  chmodSync(path, 0o755);
  return path;
}

/** An apt repository at `root` with suite `suite` (component main) offering nats-server `version`. */
export function fakeRepo(root: string, suite: string, version: string): void {
  const build = mkdtempSync(join(tmpdir(), "gdr-deb-"));
  try {
    fakeNatsBinary(join(build, "usr/sbin"), version);
    mkdirSync(join(build, "DEBIAN"));
    const control = `Package: nats-server\nVersion: ${version}-1\nArchitecture: all\nMaintainer: test <test@example.org>\nDescription: fake nats-server\n`;
    writeFileSync(join(build, "DEBIAN/control"), control);
    const file = `pool/${suite}/nats-server_${version}-1_all.deb`;
    mkdirSync(join(root, `pool/${suite}`), { recursive: true });
    execFileSync("dpkg-deb", ["--root-owner-group", "-b", build, join(root, file)], { stdio: "ignore" });
    const deb = readFileSync(join(root, file));
    const arch = execFileSync("dpkg", ["--print-architecture"], { encoding: "utf8" }).trim();
    const index = join(root, `dists/${suite}/main/binary-${arch}`);
    mkdirSync(index, { recursive: true });
    writeFileSync(join(index, "Packages"), `${control}Filename: ${file}\nSize: ${deb.length}\nSHA256: ${createHash("sha256").update(deb).digest("hex")}\n`);
    writeFileSync(join(root, `dists/${suite}/Release`), `Suite: ${suite}\nCodename: ${suite}\nComponents: main\nArchitectures: ${arch} all\n`);
  } finally {
    rmSync(build, { recursive: true, force: true });
  }
}

/** A folder of links to every command in /usr/bin and /bin, but apt's and dpkg's when `apt` is false, and nats-server's never. */
export function toolPath(dir: string, { apt }: { apt: boolean }): string {
  mkdirSync(dir, { recursive: true });
  for (const from of ["/usr/bin", "/bin"]) {
    if (!existsSync(from)) continue;
    for (const name of readdirSync(from)) {
      if (name === "nats-server" || /^(chromium|google-chrome)/.test(name)) continue;
      if (!apt && /^(apt|dpkg)/.test(name)) continue;
      const to = join(dir, name);
      if (existsSync(to)) continue;
      try {
        if (statSync(join(from, name)).isFile()) symlinkSync(join(from, name), to);
      } catch {
        // a dangling link on the system
      }
    }
  }
  return dir;
}

export interface Machine {
  /** Sources .ci/env.sh (then runs `then`) as this machine would, with a cache holding only Node. */
  source(extraEnv?: Record<string, string>, then?: string): { status: number | null; stdout: string; stderr: string; cache: string };
  dir: string;
  cleanup(): void;
}

/** A machine: its os-release (`id`, `idLike`), its apt sources (one-line text, or none), apt on PATH or not. */
export function fakeMachine(opts: { id: string; idLike?: string; sources?: (dir: string) => string; apt: boolean; deb822?: boolean }): Machine {
  const dir = mkdtempSync(join(tmpdir(), `gdr-machine-${opts.id}-`));
  const etc = join(dir, "etc-apt");
  mkdirSync(join(etc, "sources.list.d"), { recursive: true });
  const sources = opts.sources?.(dir) ?? "";
  writeFileSync(join(etc, opts.deb822 ? "sources.list.d/machine.sources" : "sources.list"), sources);
  writeFileSync(join(dir, "os-release"), `ID=${opts.id}\n${opts.idLike ? `ID_LIKE=${opts.idLike}\n` : ""}`);
  const bin = toolPath(join(dir, "bin"), { apt: opts.apt });
  const node22 = join(process.env.GDR_CACHE ?? join(homedir(), ".cache", "gdr"), "node22");
  return {
    dir,
    source(extraEnv = {}, then = 'echo "NATS_SERVER_BIN=$NATS_SERVER_BIN"; "$NATS_SERVER_BIN" --version') {
      const cache = mkdtempSync(join(dir, "cache-"));
      symlinkSync(node22, join(cache, "node22"));
      const env: Record<string, string> = {
        HOME: dir,
        PATH: `${join(dir, "extra-bin")}:${bin}`,
        GDR_CACHE: cache,
        GDR_APT_ETC: etc,
        GDR_OS_RELEASE: join(dir, "os-release"),
        GDR_NO_CHROMIUM: "1",
        ...extraEnv,
      };
      const run = spawnSync("bash", ["-c", `. .ci/env.sh || exit $?; ${then}`], {
        encoding: "utf8",
        env: env as unknown as NodeJS.ProcessEnv,
        timeout: 120_000,
      });
      return { status: run.status, stdout: run.stdout, stderr: run.stderr, cache };
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
