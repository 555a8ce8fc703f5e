// The routes FORGE=forgejo adds: Forgejo's run-level webhook, and a warm runner asking for its
// job's handle. Mounted by app.ts, under its middleware.
import { Hono } from "hono";
import { NO_POLLER_BINDING, pollerOf } from "../app/forgejo-binding.ts";
import { parseActionRun, runEventOf, verifyForgejoSignature } from "../forge/forgejo/webhook.ts";
import { StaleClaimToken, TERMINAL } from "../domain/operations.ts";
import { incarnationOf } from "../state/records.ts";
import { claimToken } from "./middleware/auth.ts";
import { readLimited, requireJsonContentType } from "./body.ts";
import { inBackground, type AppEnv } from "./env.ts";
import { HttpError } from "./errors.ts";

export function forgejoRoutes() {
  const app = new Hono<AppEnv>();

  // A Forgejo warm runner asks which job it runs, with its own claim token, until it is told.
  app.get("/v1/assignments/:id/handle", claimToken(), async (c) => {
    const id = c.var.id;
    const view = await c.var.path.get(id);
    if (incarnationOf(view) !== c.var.incarnation) throw new StaleClaimToken(id);
    if (TERMINAL.has(view.state)) throw new HttpError(409, `assignment ${id} is ${view.state}: its runner has nothing to run`);
    return view.handle ? c.text(view.handle, 200, { "cache-control": "no-store" }) : c.body(null, 204);
  });

  app.post("/v1/forgejo/webhook", async (c) => {
    const d = c.var.d;
    const f = d.config.forgejo;
    if (!f?.webhookSecret)
      throw new HttpError(404, f ? "Forgejo webhooks are not configured (GITEA_WEBHOOK_SECRET)" : "Forgejo integration is not configured (FORGE=forgejo)");
    const raw = await readLimited(c.req.raw, f.webhookMaxBytes);
    // Nothing is parsed, logged or acted on before the signature holds.
    if (!(await verifyForgejoSignature(c.req.raw.headers, raw, [f.webhookSecret, ...(f.previousWebhookSecret ? [f.previousWebhookSecret] : [])])))
      throw new HttpError(401, "missing or invalid X-Forgejo-Signature");
    requireJsonContentType(c.req.raw, " (set the webhook's content type to application/json in Forgejo)");
    const event = runEventOf(c.req.raw.headers);
    if (!event) return c.json({ ignored: `event ${c.req.header("x-forgejo-event-type") ?? c.req.header("x-forgejo-event") ?? "(none)"}` }, 202);
    const run = parseActionRun(raw).run;
    const poller = pollerOf(c.env, d.config);
    if (!poller) throw new HttpError(503, NO_POLLER_BINDING);
    inBackground(c, d, poller.pollNow(d.config), "poll after a run ended");
    return c.json({ run: run.id, polled: true }, 202);
  });

  return app;
}
