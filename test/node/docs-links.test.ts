// The README and docs/ link to each other and to files of the repository: every relative link
// names a file the repository ships, and every #anchor a heading (or an <a id>) of that page.
// What the docs cite, the project ships.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { expect, it } from "vitest";

const PAGES = [
  "README.md",
  "CONTRIBUTING.md",
  "CHANGELOG.md",
  "SECURITY.md",
  "bench/README.md",
  ...readdirSync("docs")
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];

/** The anchor GitHub, Gitea and Forgejo make of a heading. */
const slug = (heading: string) =>
  heading
    .replace(/^#+\s*/, "")
    .trim()
    .toLowerCase()
    .replace(/[^\w\- ]/g, "")
    .replaceAll(" ", "-");

/** The page's lines outside fenced code. */
const prose = (page: string) => {
  let fenced = false;
  return readFileSync(page, "utf8")
    .split("\n")
    .map((line, i) => ({ line, n: i + 1 }))
    .filter(({ line }) => {
      if (line.startsWith("```")) fenced = !fenced;
      return !fenced && !line.startsWith("```");
    });
};

const anchorsOf = (page: string) =>
  new Set(
    prose(page).flatMap(({ line }) => [...(/^#{1,6} /.test(line) ? [slug(line)] : []), ...[...line.matchAll(/<a id="([^"]+)"><\/a>/g)].map((m) => m[1]!)]),
  );

it("every relative link of the README and docs/ names a shipped file, and every anchor a heading there", () => {
  const broken: string[] = [];
  for (const page of PAGES) {
    for (const { line, n } of prose(page)) {
      for (const [, , url] of line.matchAll(/\[([^\]]+)\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(url!)) continue;
        const [path, anchor] = url!.split("#");
        const target = path ? normalize(join(dirname(page), path)) : page;
        if (!existsSync(target)) broken.push(`${page}:${n}: ${url} (no such file)`);
        else if (anchor && target.endsWith(".md") && !anchorsOf(target).has(anchor)) broken.push(`${page}:${n}: ${url} (no such heading)`);
      }
    }
  }
  expect(PAGES.length).toBeGreaterThan(10);
  expect(broken).toEqual([]);
});

it("the README stays short: about 300 lines at most, the rest in docs/", () => {
  expect(readFileSync("README.md", "utf8").split("\n").length).toBeLessThanOrEqual(320);
});

it("the README links every page of docs/, and the changelog, security policy and license", () => {
  const readme = readFileSync("README.md", "utf8");
  const linked = new Set([...readme.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => normalize(m[1]!)));
  const pages = [
    ...readdirSync("docs")
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
    "CHANGELOG.md",
    "SECURITY.md",
    "LICENSE",
  ];
  expect(pages.filter((p) => !linked.has(p))).toEqual([]);
});
