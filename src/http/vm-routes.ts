// What a VM of a cloud driver (hetzner) asks at its first boot: its launch, once, with the
// one-time token of its user_data. Mounted by app.ts, under its middleware.
import { Hono } from "hono";
import { parseId } from "../domain/operations.ts";
import type { AppEnv } from "./env.ts";
import { HttpError } from "./errors.ts";
import { markLaunched } from "../state/transitions.ts";

const BEARER = /^Bearer ([A-Za-z0-9_-]{1,128})$/;

export function vmRoutes() {
  const app = new Hono<AppEnv>();

  app.post("/v1/assignments/:id/bootstrap", async (c) => {
    const id = parseId(c.req.param("id"));
    const token = BEARER.exec(c.req.header("authorization") ?? "")?.[1];
    if (!token) throw new HttpError(401, "missing or malformed Authorization: Bearer <the one-time token of the server's user_data>");
    const launch = await c.var.d.withState((s) => s.bootstraps.take<{ script: string }>(id, token));
    // Unknown, spent, expired and another assignment's are answered alike: the answer says nothing of which.
    if (!launch) throw new HttpError(404, `no launch for assignment ${id} under this token: it is handed out once, and expires unused`);
    c.var.d.sink.event({ event: "bootstrap_taken", assignment: id, backend: undefined });
    // Noted for the launch watch (reconcile/launch-watch.ts); the launch is handed out whatever this write does.
    await c.var.d
      .withState((s) => markLaunched(s.records, id, new Date(c.var.d.now()).toISOString()))
      .catch((err: unknown) => c.var.d.sink.error("noting a launch fetched failed", { assignment: id, reason: (err as Error).message }));
    return c.body(launch.script, 200, { "content-type": "text/x-shellscript; charset=utf-8", "cache-control": "no-store" });
  });

  return app;
}
