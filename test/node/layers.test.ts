// The layers of src/ (CONTRIBUTING.md, "Where code goes"; .dependency-cruiser.cjs): no import runs
// up, type-only ones included, with or without a cycle. The imports that broke the rules when
// they were written down are listed in .dependency-cruiser-known-violations.json: none may be
// added, and one that is gone must leave the list, so that it only shrinks.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, expect, it } from "vitest";

const CONFIG = resolve(".dependency-cruiser.cjs");
const KNOWN = ".dependency-cruiser-known-violations.json";
const bin = resolve("node_modules/.bin/depcruise");

interface Violation {
  from: string;
  to: string;
  rule: { name: string };
}

/** The violations dependency-cruiser finds under `cwd`'s src/ with the project's rules. */
function violations(cwd = ".", known?: string): Violation[] {
  const out = execFileSync(bin, ["src", "--config", CONFIG, "--output-type", "json", ...(known ? ["--ignore-known", known] : [])], {
    cwd,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
  });
  return (JSON.parse(out) as { summary: { violations: (Violation & { rule: { severity: string } })[] } }).summary.violations.filter(
    (v) => v.rule.severity !== "ignore",
  );
}

const line = (v: Violation) => `${v.rule.name}: ${v.from} → ${v.to}`;

it("src/ imports nothing against its layers beyond the known list, and the known list holds only what is still there", () => {
  const known = (JSON.parse(readFileSync(KNOWN, "utf8")) as Violation[]).map(line);
  const now = violations().map(line);
  expect(
    now.filter((v) => !known.includes(v)),
    "new imports against the layers",
  ).toEqual([]);
  expect(
    known.filter((v) => !now.includes(v)),
    "gone: take them out of the known list",
  ).toEqual([]);
  expect(violations(".", KNOWN).map(line)).toEqual([]);
});

const scratch = mkdtempSync(join(tmpdir(), "gdr-layers-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

it("the rules catch an import against the layers with no cycle: a store importing the HTTP layer, a store reaching into a forge, one forge importing another, a module at src/'s root; near misses: policy using the Forge contract, a forge driving policy and using its own folder, pass", () => {
  const tree: Record<string, string> = {
    "src/index.ts": 'import "./http/app.ts";\n',
    "src/http/app.ts": 'import { x } from "../state/store.ts";\nexport const y = x;\n',
    "src/state/store.ts": 'import type { Y } from "../http/types.ts";\nexport const x: Y = 1;\n',
    "src/http/types.ts": "export type Y = number;\n",
    "src/reconcile/pass.ts": 'import { w } from "../domain/forge.ts";\nexport const p = w;\n',
    "src/state/runners.ts": 'import type { Z } from "../forge/gitea/client.ts";\nexport const r: Z = 1;\n',
    "src/forge/gitea/client.ts": 'import { w } from "../../domain/forge.ts";\nexport type Z = number;\nexport const z = w;\n',
    "src/forge/forgejo/poll.ts": 'import { z } from "../gitea/client.ts";\nimport { p } from "../../reconcile/pass.ts";\nexport const q = z + p;\n',
    "src/domain/forge.ts": "export const w = 1;\n",
    "src/helpers.ts": 'import { w } from "./domain/forge.ts";\nexport const h = w;\n',
  };
  for (const [path, text] of Object.entries(tree)) {
    mkdirSync(dirname(join(scratch, path)), { recursive: true });
    writeFileSync(join(scratch, path), text);
  }
  expect(violations(scratch).map(line).sort()).toEqual([
    "forges-stay-apart: src/forge/forgejo/poll.ts → src/forge/gitea/client.ts",
    "policy-reaches-no-forge: src/state/runners.ts → src/forge/gitea/client.ts",
    "root-holds-the-entry-only: src/helpers.ts → src/domain/forge.ts",
    "state-imports-up: src/state/runners.ts → src/forge/gitea/client.ts",
    "state-imports-up: src/state/store.ts → src/http/types.ts",
  ]);
});
