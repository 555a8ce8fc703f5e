// The HTTP API. Handlers only parse, call a domain operation and map the result.
import { Hono } from "hono";
import { MAX_ASSIGNMENT_BYTES } from "../model/assignment.ts";
import { ConfigError } from "../app/config.ts";
import type { Invocation } from "../domain/context.ts";
import { giteaRunnerOf, parseId } from "../domain/operations.ts";
import { releaseRunner } from "../domain/teardown.ts";
import { interruptAssignment, MAX_NOTICE_BYTES, parseNotice } from "../domain/interrupt.ts";
import { observeStartup, settleTaken } from "../pools/taken.ts";
import { maintainAfterRelease } from "../pools/maintain.ts";
import { directPath, type RequestPath } from "../app/request-path.ts";
import { claimToken, dispatchToken, secretBearer, statusPassword } from "./middleware/auth.ts";
import { contentSecurityPolicy, renderStatusPage, styleHash } from "./status-page.ts";
import { readStatus } from "../observe/status.ts";
import { openApiDocument } from "./openapi.ts";
import { formatMetrics, METRICS_CONTENT_TYPE } from "../observe/metrics.ts";
import { takeSnapshot } from "../observe/snapshot.ts";
import { readUsage, usageWindow } from "../observe/usage.ts";
import { RECORD_TTL_MS } from "../nats/layout.ts";
import { recordsBucket, type Backend } from "../nats/names.ts";
import { readJsonBody, readLimited, requireJsonContentType } from "./body.ts";
import { checkHealth, createHealthCache, type HealthCache } from "./health.ts";
import { parseWorkflowJob } from "../forge/gitea/webhook.ts";
import { verifyGiteaSignature } from "../forge/gitea/signature.ts";
import { forgejoRoutes } from "./forgejo-routes.ts";
import { vmRoutes } from "./vm-routes.ts";
import { cacheRoutes } from "./cache-routes.ts";
import { cacheSiteOf } from "../app/cache-site.ts";
import { inBackground, type AppContext, type AppEnv as Env } from "./env.ts";
import { answerFor, HttpError } from "./errors.ts";
import { capacityWaitDelay, DEFAULT_DELAYS } from "../reconcile/decide.ts";

/** A publish or a claim reconciles its backend at once, within this budget, after responding. */
export const EAGER_BUDGET_MS = 5_000;

export interface AppDeps {
  /** Builds the dispatcher of one request from the Worker's environment (throws ConfigError). */
  dispatcher(env: unknown): Invocation;
  /** Where the request path's NATS work runs; default: on the dispatcher's own connection. */
  path?(d: Invocation, env: unknown): RequestPath;
  /** Where unauthenticated /healthz answers are kept; default: one cache per app (per isolate). */
  health?: HealthCache;
}

export function createApp(deps: AppDeps) {
  const app = new Hono<Env>();

  app.use("*", async (c, next) => {
    const d = deps.dispatcher(c.env);
    const background: Promise<unknown>[] = [];
    c.set("d", d);
    c.set("path", deps.path ? deps.path(d, c.env) : directPath(d));
    c.set("background", background);
    try {
      await next();
    } finally {
      // The invocation's connection outlives the response only as long as its background work.
      const closed = Promise.allSettled(background).then(() => d.close());
      try {
        c.executionCtx.waitUntil(closed);
      } catch {
        // No execution context (app.request in a test): the promise still runs.
      }
    }
  });

  // Anyone may ask whether it is healthy, and what is wrong; the counts need the dispatch token.
  // Without it the answer is the isolate's recent one (see health.ts): no NATS work per request.
  const health = deps.health ?? createHealthCache();
  app.get("/healthz", dispatchToken({ optional: true }), async (c) => {
    const d = c.var.d;
    const detailed = c.req.header("authorization") !== undefined;
    const check = () => checkHealth(d.config, detailed);
    const { status, body } = detailed ? await check() : await health(d.config, check);
    // A missing gateway binding slows the request path but breaks nothing: a warning, not a 503.
    const warnings = c.var.path.degraded ? { warnings: [c.var.path.degraded] } : {};
    return c.json({ ...body, ...warnings }, status);
  });

  app.post("/v1/assignments", dispatchToken(), async (c) => {
    const d = c.var.d;
    const published = await c.var.path.publish(await readJsonBody(c.req.raw, MAX_ASSIGNMENT_BYTES));
    if (published.pending) inBackground(c, d, c.var.path.record(published.pending), "record after publish");
    reconcileSoon(c, d, "publish", published.backend);
    return c.json({ id: published.id, stream: published.stream, seq: published.seq, duplicate: published.duplicate }, 202);
  });

  app.get("/v1/assignments/:id", dispatchToken(), async (c) => c.json(await c.var.path.get(parseId(c.req.param("id")))));

  app.post("/v1/assignments/:id/claim", claimToken(), async (c) => {
    const d = c.var.d;
    const { held, changed: _changed, ...view } = await c.var.path.claim(c.var.id, c.var.incarnation);
    if (!held) reconcileSoon(c, d, "claim", view.backend);
    return c.json(view);
  });

  // A runner's watcher: its machine is being taken back (a Spot notice). Before the claim a new
  // runner is asked for at once; after it, the job is listed for a rerun (domain/interrupt.ts).
  app.post("/v1/assignments/:id/interrupt", claimToken(), async (c) => {
    const d = c.var.d;
    const { notice } = parseNotice(await readJsonBody(c.req.raw, MAX_NOTICE_BYTES));
    const { outcome, view } = await interruptAssignment(d, c.var.id, { notice, by: "runner", incarnation: c.var.incarnation });
    if (outcome === "replaced") reconcileSoon(c, d, "claim", view.backend);
    return c.json({ outcome, ...view });
  });

  app.route("/", forgejoRoutes());
  app.route("/", vmRoutes());
  app.route(
    "/",
    cacheRoutes((c) => {
      const d = (c as unknown as AppContext).var.d;
      return cacheSiteOf(d, c.env as Record<string, unknown>, (work) => inBackground(c as unknown as AppContext, d, work, "cache figures"));
    }),
  );

  app.post("/v1/assignments/:id/complete", claimToken(), async (c) => {
    const d = c.var.d;
    const id = c.var.id;
    const { contended, changed, runsOn, ...view } = await c.var.path.complete(id, c.var.incarnation);
    // Only the call that completed it tears the runner down; a repeat changes nothing.
    if (changed)
      inBackground(
        c,
        d,
        releaseRunner(d, id, runsOn, giteaRunnerOf(view)).then(() => maintainAfterRelease(d, view.pool, eagerPass(c, d))),
        "teardown after complete",
      );
    if (contended) reconcileSoon(c, d, "release", view.backend);
    return c.json(view);
  });

  app.post("/v1/gitea/webhook", async (c) => {
    const d = c.var.d;
    const gitea = d.config.gitea;
    if (!gitea) throw new HttpError(404, "Gitea integration is not configured (GITEA_URL)");
    const raw = await readLimited(c.req.raw, gitea.webhookMaxBytes);
    // Nothing is parsed, logged or published before the signature holds.
    if (!(await verifyGiteaSignature(c.req.raw.headers, raw, [gitea.webhookSecret, ...(gitea.previousWebhookSecret ? [gitea.previousWebhookSecret] : [])])))
      throw new HttpError(401, "missing or invalid X-Gitea-Signature");
    requireJsonContentType(c.req.raw, " (set the webhook's content type to application/json in Gitea)");
    const event = c.req.header("x-gitea-event-type") ?? c.req.header("x-gitea-event") ?? "";
    if (event !== "workflow_job") return c.json({ ignored: `event ${event || "(none)"}` }, event === "ping" ? 200 : 202);
    let value: unknown;
    try {
      value = JSON.parse(new TextDecoder().decode(raw));
    } catch {
      throw new HttpError(400, "body is not valid JSON", [{ field: "(body)", message: "not valid JSON" }]);
    }
    const outcome = await c.var.path.webhook(parseWorkflowJob(value));
    if (outcome.record) inBackground(c, d, c.var.path.record(outcome.record, outcome.facts), "record after webhook");
    if (outcome.reconcile) reconcileSoon(c, d, outcome.after ?? "webhook", outcome.reconcile);
    const t = outcome.teardown;
    if (t)
      inBackground(
        c,
        d,
        releaseRunner(d, t.id, t.backend, t.giteaRunner).then(() => maintainAfterRelease(d, t.pool, eagerPass(c, d))),
        "runner teardown",
      );
    // A warm runner's replacement is asked for now, not at the next tick.
    if (outcome.taken) inBackground(c, d, settleTaken(d, outcome.taken, eagerPass(c, d)), "after a runner took another job");
    if (outcome.started) inBackground(c, d, observeStartup(d, outcome.started), "job start-up time");
    return c.json(outcome.body, outcome.status);
  });

  // Prometheus scrapes with METRICS_TOKEN; without that secret there is no such endpoint.
  app.get(
    "/metrics",
    secretBearer("METRICS_TOKEN", (config) => config.metricsToken),
    async (c) => c.body(formatMetrics(await takeSnapshot(c.var.d)), 200, { "content-type": METRICS_CONTENT_TYPE }),
  );

  // The status page, for a person with a browser: HTTP Basic, any user name, STATUS_TOKEN as the
  // password. Without that secret there is no such page.
  app.get("/status", statusPassword(), async (c) => {
    const d = c.var.d;
    const page = await renderStatusPage(await readStatus(d));
    return c.html(page, 200, {
      "content-security-policy": contentSecurityPolicy(await styleHash()),
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
    });
  });

  app.get("/v1/status", dispatchToken(), async (c) => c.json(await readStatus(c.var.d), 200, { "cache-control": "no-store" }));

  app.get("/v1/usage", dispatchToken(), async (c) => {
    const d = c.var.d;
    const window = usageWindow({ since: c.req.query("since"), until: c.req.query("until") }, d.now(), RECORD_TTL_MS);
    if (Array.isArray(window)) throw new HttpError(400, `invalid usage window: ${window.map((i) => `${i.field} ${i.message}`).join("; ")}`, window);
    const usage = await d.withState((_state, handle) => readUsage(handle, recordsBucket(d.config), window.since, window.until, d.now()));
    return c.json(usage, 200, { "cache-control": "no-store" });
  });

  app.get("/openapi.json", (c) => c.json(openApiDocument()));

  app.notFound((c) => c.json({ error: "not found" }, 404));

  app.onError((err, c) => {
    const answer = answerFor(err);
    if (answer && answer.status !== 503) return c.json({ error: answer.message, ...(answer.fields ? { fields: answer.fields } : {}) }, answer.status);
    if (err instanceof ConfigError) {
      console.error(JSON.stringify({ event: "config_error", problems: err.problems }));
      // What is wrong is the operator's to see, on /healthz; any other caller learns only that it is.
      if (c.req.path === "/healthz") return c.json({ ok: false, error: "dispatcher is misconfigured", problems: err.problems }, 503);
      return c.json({ error: "dispatcher is misconfigured" }, 500);
    }
    console.error(JSON.stringify({ event: "error", path: c.req.path, message: err.name }));
    if (answer) return c.json({ error: answer.message }, answer.status);
    return c.json({ error: "internal error" }, 500);
  });

  return app;
}

/** A pass for the warm runner just published on `backend` (a pool's replacement, a server rebuilt at once), within this request's background work. */
const eagerPass = (c: AppContext, d: Invocation) => (backend: Backend) =>
  d.config.eagerReconcile
    ? c.var.path.reconcile("publish", Math.min(EAGER_BUDGET_MS, d.config.reconcileBudgetMs), { only: [backend], eager: true })
    : Promise.resolve();

function reconcileSoon(c: AppContext, d: Invocation, trigger: "publish" | "webhook" | "claim" | "release", backend: Backend) {
  if (!d.config.eagerReconcile) return;
  // After a claim whose own ack failed, the runner's message is out on a nak delay; after a release, so are the messages
  // waiting for capacity (1 to 3 s, spread at random: wait for the longest). Wait for them, so that
  // the ack, or the freed slot, is taken now rather than at the next cron tick. With fair share
  // those wait in the wait set instead, and the pass gives the slot from there at once.
  const delay = trigger === "claim" ? DEFAULT_DELAYS.claim : trigger === "release" && !d.config.fairShare ? capacityWaitDelay(1) : undefined;
  const wait = delay === undefined ? 0 : (d.config.retryDelayMs ?? delay) + 250;
  const budget = Math.min(EAGER_BUDGET_MS, d.config.reconcileBudgetMs);
  inBackground(
    c,
    d,
    c.var.path.reconcile(trigger, budget, { only: [backend], firstPullWaitMs: Math.min(wait, budget - 500), eager: true }),
    `reconcile after ${trigger}`,
  );
}
