// The status page as a person sees it: headless Chromium (Debian's, from .ci/env.sh) opens it on a
// running `wrangler dev` with a known state, passing the password the way a browser does after
// its Basic prompt. The test reads the visible text and keeps a screenshot in test-results/.
import { mkdirSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { startWorker } from "../../bench/lib.mjs";
import { renderStatusPage } from "../../src/http/status-page.ts";
import { backendSnapshot } from "../harness/metrics.ts";
import type { Status } from "../../src/observe/status.ts";
import { currentClaimToken, provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";

const STATUS_TOKEN = "status-page-token-0123456789";
const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 2, EAGER_RECONCILE: "false", RETRY_DELAY_MS: 100, STATUS_TOKEN });
// The Worker's own URL: claims go there.
delete (env as Record<string, string | undefined>).PUBLIC_URL;
let worker: Awaited<ReturnType<typeof startWorker>>;
let browser: Browser;

beforeAll(async () => {
  const executablePath = process.env.GDR_CHROMIUM;
  if (!executablePath) throw new Error("GDR_CHROMIUM is not set: source .ci/env.sh, which provisions Debian's chromium");
  await provisionEnv({ ...env, PUBLIC_URL: "http://127.0.0.1:1" });
  [worker, browser] = await Promise.all([
    startWorker(env),
    // As root in a closed network: no sandbox, and none of Chromium's own background connections.
    chromium.launch({
      executablePath,
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    }),
  ]);
}, 120_000);
afterAll(async () => {
  await browser?.close();
  worker?.stop();
});

const post = (id: string, name: string) =>
  fetch(`${worker.url}/v1/assignments`, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ version: 1, id, backend: "pod", labels: ["x"], job: { id: 1, runId: 1, attempt: 1, repository: "acme/widgets", name } }),
  });

it("shows the numbers per backend and the recent assignments, in a real browser", { timeout: 120_000 }, async () => {
  for (const [id, name] of [
    ["sp-1", "build"],
    ["sp-2", "test"],
    ["sp-3", "lint"],
    ["sp-4", "docs"],
  ])
    expect((await post(id!, name!)).status).toBe(202);
  // A cron pass hands out two (MaxAckPending = capacity 2) and provisions both; sp-1 claims; the
  // next pass acks it and hands out sp-3, which finds no slot and waits its turn in the wait set
  // (fair share), and so does sp-4 behind it; sp-2 is held for its claim.
  await worker.tick();
  const claim = await fetch(`${worker.url}/v1/assignments/sp-1/claim`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${await currentClaimToken((path) => fetch(`${worker.url}${path}`, { headers: { authorization: `Bearer ${TEST_SECRETS.DISPATCH_TOKEN}` } }), "sp-1")}`,
    },
  });
  expect(claim.status).toBe(200);
  await worker.tick();

  const context = await browser.newContext({ httpCredentials: { username: "ops", password: STATUS_TOKEN }, viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  const response = await page.goto(`${worker.url}/status`);
  expect(response?.status()).toBe(200);
  const text = await page.locator("body").innerText();
  const backend = await page.getByRole("region", { name: "backend pod" }).innerText();
  mkdirSync("test-results", { recursive: true });
  await page.screenshot({ path: "test-results/status-page.png", fullPage: true });

  expect(backend).toContain("2 of 2 slots used, 0 free");
  const counts = Object.fromEntries(
    backend
      .split("\n")
      .map((l) => /^(.+?)\t(\d+)$/.exec(l))
      .filter((m) => m)
      .map((m) => [m![1], Number(m![2])]),
  );
  // Fair share (the default): sp-3 finds no slot and goes into the wait set, and the pass pulls on
  // past MaxAckPending: sp-4, behind it, waits there too.
  expect(counts).toEqual({
    Queued: 0,
    "Waiting for capacity": 2,
    "Waiting at a quota limit": 0,
    "Pending at the backend": 0,
    "Ready, waiting for the claim": 1,
    Running: 1,
    "Registrations under way": 0,
  });
  expect(text).toContain("Healthy: /healthz names no problem.");
  // wrangler.jsonc binds the cache's bucket (wrangler's local R2): the page says it is on, unused so far.
  expect(await page.getByRole("region", { name: "actions cache" }).innerText()).toContain("On; no repository has used it yet.");
  // Busiest owners: acme holds both slots, and sp-3 and sp-4 wait their turn.
  const owners = await page.getByRole("region", { name: "busiest owners" }).locator("tbody tr").allInnerTexts();
  expect(owners).toEqual(["acme\t2\t2\t0"]);
  // The page says what an owner is, and what "-" and "other" stand for.
  expect(await page.getByRole("region", { name: "busiest owners" }).innerText()).toContain(
    '"-" stands for jobs published through the API, which name no repository; "other" sums the owners past the busiest',
  );
  const rows = await page.locator("tbody tr").allInnerTexts();
  expect(rows.find((r) => r.startsWith("sp-1"))).toMatch(/^sp-1\tacme\/widgets\tbuild\tclaimed\t\d+ s\t–$/);
  expect(rows.find((r) => r.startsWith("sp-4"))).toMatch(/^sp-4\tacme\/widgets\tdocs\tcapacity_wait\t\d+ s\t–$/);
  // The page asks for nothing from anywhere else, and the browser blocked nothing.
  const blocked: string[] = [];
  page.on("console", (m) => m.type() === "error" && blocked.push(m.text()));
  await page.reload();
  expect(blocked).toEqual([]);
  await context.close();
});

it("a browser without the password, or with a wrong one, is challenged for Basic and shown nothing", async () => {
  for (const httpCredentials of [undefined, { username: "ops", password: `${STATUS_TOKEN.slice(0, -1)}x` }]) {
    const context = await browser.newContext(httpCredentials ? { httpCredentials } : {});
    const challenge = await context.request.get(`${worker.url}/status`);
    expect(challenge.status()).toBe(401);
    expect(challenge.headers()["www-authenticate"]).toBe('Basic realm="gitea-edge-dispatcher status", charset="UTF-8"');
    // Headless, Chromium cannot prompt: it fails the navigation, or shows the 401 it got.
    const page = await context.newPage();
    const shown = await page.goto(`${worker.url}/status`).then(
      async (r) => ({ status: r?.status(), body: (await r?.text()) ?? "" }),
      (err: Error) => ({ error: err.message }),
    );
    if ("error" in shown) expect(shown.error).toMatch(/ERR_INVALID_AUTH_CREDENTIALS/);
    else expect(shown).toMatchObject({ status: 401, body: expect.not.stringContaining("slots used") });
    await context.close();
  }
});

it("long names wrap or are cut with the whole name in a title, and bidi controls cannot reorder a cell", { timeout: 60_000 }, async () => {
  const long = "x".repeat(256);
  // U+202E (right-to-left override) would show "build-exe.txt" for what is "build-txt.exe".
  const tricky = "build-\u202Etxt.exe\u202C-\u2067x\u2069";
  for (const [id, name] of [
    ["sp-long", long],
    ["sp-bidi", tricky],
  ])
    expect((await post(id!, name!)).status).toBe(202);
  const context = await browser.newContext({ httpCredentials: { username: "ops", password: STATUS_TOKEN }, viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  expect((await page.goto(`${worker.url}/status`))?.status()).toBe(200);
  await page.screenshot({ path: "test-results/status-page-odd-names.png", fullPage: true });
  // Nothing is wider than the window: a 256-character name widened it to about 5400 px.
  expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(1100);
  const longCell = page.locator("tbody tr", { hasText: "sp-long" }).locator("td").nth(2);
  expect(await longCell.innerText()).toBe(`${"x".repeat(63)}…`);
  expect(await longCell.getAttribute("title")).toBe(long);
  const bidiRow = await page.locator("tbody tr", { hasText: "sp-bidi" }).innerText();
  expect(bidiRow).toContain("build-[U+202E]txt.exe[U+202C]-[U+2067]x[U+2069]");
  expect(await page.locator("body").innerText()).not.toMatch(/[\u202A-\u202E\u2066-\u2069]/);
  await context.close();
});

it("a reusing pool's start-ups by how the runner came, and its servers' paid hours, read in a real browser", { timeout: 60_000 }, async () => {
  // Cumulative counts per bucket (1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, …): 3 starts by reuse within 2 s, 1 new at 50 s.
  const cumulative = (upTo: [le: number, n: number][]) =>
    [1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600].map((b) => upTo.filter(([le]) => le <= b).reduce((s, [, n]) => s + n, 0));
  const reuse = { buckets: cumulative([[2, 3]]), sum: 4.5, count: 3 };
  const fresh = { buckets: cumulative([[60, 1]]), sum: 50, count: 1 };
  const html: string = await renderStatusPage({
    at: "2026-12-07T10:00:00Z",
    problems: [],
    recent: [],
    backends: [backendSnapshot("vm", { slotsInUse: 3, readyForClaim: 1, running: 2, delivered: 5 })],
    pools: [
      {
        pool: "vms",
        backend: "vm",
        target: 0,
        maxRunners: null,
        idle: 1,
        busy: 2,
        booting: 0,
        warm: 1,
        warmByReuse: 1,
        startup: {
          buckets: cumulative([
            [2, 3],
            [60, 1],
          ]),
          sum: 54.5,
          count: 4,
          via: { reuse, new: fresh },
        },
      },
    ],
    owners: [],
    cloud: [{ backend: "vm", driver: "hetzner", full: false, fullTotal: 0, swept: 1, paid: [{ pool: "vms", servers: 3, used: 9_000, givenUp: 1_800 }] }],
    stream: { messages: 0, published: 0, acked: 0 },
  } as Status);
  const page = await browser.newPage({ viewport: { width: 1100, height: 700 } });
  await page.setContent(String(html));
  mkdirSync("test-results", { recursive: true });
  await page.screenshot({ path: "test-results/status-page-reuse.png", fullPage: true });
  expect(await page.getByRole("table", { name: "start-up by how the runner came" }).locator("tbody tr").allInnerTexts()).toEqual([
    "vms\twarm by reuse\t3\t≤ 2 s\t≤ 2 s",
    "vms\tnew, made for the job\t1\t≤ 60 s\t≤ 60 s",
  ]);
  expect(await page.getByRole("table", { name: "paid server hours" }).locator("tbody tr").allInnerTexts()).toEqual(["vms\t3\t2.5 h\t0.5 h"]);
  expect(await page.getByRole("region", { name: "runner pools" }).innerText()).toContain("1 / 0 (1 by reuse)");
  await page.close();
});
