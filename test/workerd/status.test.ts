// GET /status and GET /v1/status through the app: who may see them, what they show, and that
// nothing secret or unescaped reaches the page. The browser test (test/node/status-page.test.ts)
// looks at the same page in headless Chromium.
import { expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { provisionEnv, testEnv, TEST_SECRETS } from "../harness/env.ts";
import { bearer, captureLogs, request } from "../harness/worker.ts";

const STATUS_TOKEN = "status-token-0123456789abcdef";
const basic = (user: string, password: string) => ({ authorization: `Basic ${btoa(`${user}:${password}`)}` });

it("the status page: 404 without STATUS_TOKEN, 401 asking for Basic, any user name, a strict CSP, values escaped", async () => {
  const logs = captureLogs();
  try {
    const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 3, EAGER_RECONCILE: "false", STATUS_TOKEN });
    const config = await provisionEnv(env);
    const job = { id: 7, runId: 70, attempt: 1, repository: "acme/<script>alert(1)</script>", name: "build & test" };
    // The API refuses such a name now (job.repository); a record an older release stored may hold one.
    const refused = await request(env, "/v1/assignments", {
      method: "POST",
      headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true),
      body: JSON.stringify({ version: 1, id: "page-1", backend: "pod", labels: ["x"], job }),
    });
    expect(refused.status).toBe(400);
    await createDispatcher({ config }).withState(({ records }) =>
      records.offer({
        version: 1,
        id: "page-1",
        backend: "pod",
        workload: "spiffe://example.org/runner/pod/page-1",
        labels: ["x"],
        job,
        createdAt: new Date().toISOString(),
      }),
    );

    expect((await request({ ...env, STATUS_TOKEN: "" }, "/status", { headers: basic("ops", STATUS_TOKEN) })).status).toBe(404);
    for (const headers of [
      {},
      basic("ops", `${STATUS_TOKEN}x`),
      basic("ops", STATUS_TOKEN.slice(0, -1)),
      bearer(STATUS_TOKEN),
      { authorization: "Basic !!!" },
    ]) {
      const res = await request(env, "/status", { headers });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe('Basic realm="gitea-edge-dispatcher status", charset="UTF-8"');
    }
    for (const user of ["ops", "", "constructor"]) {
      const res = await request(env, "/status", { headers: basic(user, STATUS_TOKEN) });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const res = await request(env, "/status", { headers: basic("a:b", STATUS_TOKEN) }); // user names may hold no colon; the password may
    expect(res.status).toBe(401);
    await res.arrayBuffer();

    const page = await request(env, "/status", { headers: basic("ops", STATUS_TOKEN) });
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.headers.get("content-security-policy")).toMatch(
      /^default-src 'none'; style-src 'sha256-[A-Za-z0-9+/]+=*'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'$/,
    );
    const text = await page.text();
    expect(text).toContain("acme/&lt;script&gt;alert(1)&lt;/script&gt;");
    expect(text).toContain("build &amp; test");
    expect(text).not.toContain("<script");
    expect(text).toMatch(/<meta http-equiv="refresh" content="5">/);
    expect(text).toContain("0 of 3 slots used, 3 free");
    for (const secret of [STATUS_TOKEN, TEST_SECRETS.DISPATCH_TOKEN, TEST_SECRETS.CLAIM_SIGNING_KEY, TEST_SECRETS.BACKEND_TOKEN])
      expect(text).not.toContain(secret);
  } finally {
    logs.restore();
  }
});

it("GET /v1/status: the same data as JSON with the dispatch token", async () => {
  const env = testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 3, EAGER_RECONCILE: "false" });
  await provisionEnv(env);
  const logs = captureLogs();
  try {
    const job = { id: 8, runId: 80, attempt: 1, repository: "acme/widgets", name: "lint" };
    await request(env, "/v1/assignments", {
      method: "POST",
      headers: bearer(TEST_SECRETS.DISPATCH_TOKEN, true),
      body: JSON.stringify({ version: 1, id: "json-1", backend: "pod", labels: ["x"], job }),
    });
    expect((await request(env, "/v1/status")).status).toBe(401);
    expect((await request(env, "/v1/status", { headers: bearer(`${TEST_SECRETS.DISPATCH_TOKEN}x`) })).status).toBe(401);
    const res = await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      problems: [],
      stream: { messages: 1, published: 1, acked: 0 },
      backends: [{ backend: "pod", capacity: 3, slotsInUse: 0, queued: 1, running: 0 }],
      recent: [{ id: "json-1", backend: "pod", state: "received", repository: "acme/widgets", job: "lint", runner: null }],
    });
    expect(Object.keys((body.recent as object[])[0]!).sort()).toEqual([
      "ageSeconds",
      "backend",
      "createdAt",
      "id",
      "job",
      "note",
      "repository",
      "runner",
      "state",
      "updatedAt",
    ]);
  } finally {
    logs.restore();
  }
});
