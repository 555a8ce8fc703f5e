// The deploy commands the README and docs/deploy.md print, run as written against every example
// file, as a dry run: each `./run provision …` with --dry-run, each `./run deploy …` with
// --dry-run (wrangler builds the Worker and uploads nothing), each `./run wrangler …` with --help
// (the command exists, and ./run hands it to wrangler). A command naming `--env X` runs against
// the examples that define X, and some must. Each example is copied over wrangler.jsonc in a
// directory of its own, as docs/deploy.md says, beside links to the clone's sources.
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = resolve(".");
const DOCS = ["README.md", "docs/deploy.md"];
const EXAMPLES = readdirSync("examples").filter((f) => /^wrangler\..*\.jsonc$/.test(f));
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Every `./run …` command of the docs' shell blocks and inline code, without its env assignments, stdin or comment. */
function documentedCommands(text: string): string[] {
  const found = new Set<string>();
  const blocks = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) => m[1]!.split("\n"));
  const inline = [...text.matchAll(/`([^`\n]*\.\/run [^`\n]*)`/g)].map((m) => m[1]!);
  for (const line of [...blocks, ...inline]) {
    for (const part of line.replace(/#.*$/, "").split(/&&|\|/)) {
      const m = /(?:^|\s)(\.\/run\s+\S.*)$/.exec(part.trim());
      if (m && !/^\.\/run \S+ …/.test(m[1]!)) found.add(m[1]!.trim().replace(/\s+/g, " "));
    }
  }
  return [...found];
}

/** The environments an example defines (its `env` keys). */
function environments(file: string): string[] {
  const text = readFileSync(join("examples", file), "utf8");
  const env = /\n {2}"env": \{([\s\S]*)\n {2}\}/.exec(text)?.[1] ?? "";
  return [...env.matchAll(/\n {4}"([a-z0-9_-]+)": \{/g)].map((m) => m[1]!);
}

/** A directory laid out as a clone whose wrangler.jsonc is `example`. */
function cloneWith(example: string): string {
  const dir = mkdtempSync(join(tmpdir(), "gdr-docs-"));
  dirs.push(dir);
  for (const name of ["src", "scripts", "node_modules", ".ci", "package.json", "package-lock.json", "tsconfig.json", "run"])
    symlinkSync(join(ROOT, name), join(dir, name));
  copyFileSync(join("examples", example), join(dir, "wrangler.jsonc"));
  return dir;
}

function run(dir: string, command: string): Promise<{ code: number | null; out: string }> {
  const args = command.split(" ").slice(1);
  return new Promise((done) => {
    const child = spawn(join(dir, "run"), args, {
      cwd: dir,
      env: { ...process.env, GDR_NO_INSTALL: "1", WRANGLER_SEND_METRICS: "false", CI: "true", NATS_USER: "", NATS_PASS: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (out += b.toString()));
    child.on("close", (code) => done({ code, out }));
  });
}

/** The dry form of a documented command: nothing is sent to NATS or Cloudflare. */
function dry(command: string, outdir: string): string {
  const [, script, ...rest] = command.split(" ");
  if (script === "provision") return `./run provision ${[...rest.filter((a) => a !== "--dry-run"), "--dry-run"].join(" ")}`;
  if (script === "deploy") return `./run deploy ${[...rest.filter((a) => a !== "--dry-run"), "--dry-run", "--outdir", outdir].join(" ")}`;
  // wrangler: the command and its flags, asked for its help (a NAME or FILE argument stays: help ignores it).
  return `./run wrangler ${[...rest, "--help"].join(" ")}`;
}

const commands = [...new Set(DOCS.flatMap((f) => documentedCommands(readFileSync(f, "utf8"))))];

describe("the documented deploy commands", () => {
  it("are found: provision, deploy and wrangler's, and none through npx (the system's Node may be older than wrangler needs)", () => {
    const scripts = new Set(commands.map((c) => c.split(" ")[1]));
    expect([...scripts].filter((s) => ["provision", "deploy", "wrangler"].includes(s!)).sort()).toEqual(["deploy", "provision", "wrangler"]);
    for (const f of [...DOCS, "docs/troubleshooting.md", "docs/operations.md", "docs/backends.md", ...EXAMPLES.map((e) => `examples/${e}`)])
      expect(readFileSync(f, "utf8"), f).not.toMatch(/npx wrangler/);
  });

  it("name only environments some example defines", () => {
    // `--env NAME` (capitals) stands for any.
    const named = commands.flatMap((c) => [...c.matchAll(/--env ([a-z0-9_-]+)(?:\s|$)/g)].map((m) => m[1]!));
    expect(named).toContain("staging");
    for (const env of named)
      expect(
        EXAMPLES.filter((e) => environments(e).includes(env)),
        `--env ${env}`,
      ).not.toEqual([]);
    // The example headers' own advice: a flag after `--` reaches provision as an argument it refuses.
    for (const e of EXAMPLES) expect(readFileSync(join("examples", e), "utf8"), e).not.toMatch(/`-- --env/);
  });

  it.each(EXAMPLES)("run as a dry run against %s", { timeout: 240_000 }, async (example) => {
    const dir = cloneWith(example);
    const own = environments(example);
    const mine = commands.filter((c) => {
      const env = /--env (\S+)/.exec(c)?.[1];
      return (c.startsWith("./run provision") || c.startsWith("./run deploy") || c.startsWith("./run wrangler")) && (!env || own.includes(env));
    });
    expect(mine.some((c) => c.startsWith("./run deploy"))).toBe(true);
    const outcomes: string[] = [];
    // wrangler's help the same for every example: asked once, with the first.
    const asked = example === EXAMPLES[0] ? mine : mine.filter((c) => !c.startsWith("./run wrangler"));
    for (const c of asked) {
      const { code, out } = await run(dir, dry(c, join(dir, "out")));
      outcomes.push(`${c}: ${code === 0 ? "ok" : `exit ${code}\n${out.slice(-1_500)}`}`);
    }
    expect(outcomes.filter((o) => !o.endsWith(": ok"))).toEqual([]);
  });
});
