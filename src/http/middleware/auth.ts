// Authentication as Hono middleware, one factory per kind of credential, so that a route names who
// may call it and its handler holds no check of its own:
// - dispatchToken(): the operator's Bearer DISPATCH_TOKEN (401 when missing or wrong);
// - secretBearer(): a Bearer secret of its own (METRICS_TOKEN); no such route without the secret;
// - claimToken(): an assignment's claim token, for the id in the path (401 missing, 403 another
//   assignment's); the handler reads the incarnation it was signed for from `c.var.incarnation`;
// - statusPassword(): HTTP Basic with STATUS_TOKEN, so that a browser asks for it.
import { createMiddleware } from "hono/factory";
import type { Config } from "../../app/config.ts";
import { parseId } from "../../domain/operations.ts";
import { basicPasswordMatches, requireBearer, requireClaimToken } from "../auth.ts";
import type { AppEnv } from "../env.ts";
import { HttpError } from "../errors.ts";

/** The operator's token; with `optional`, only when the request brings credentials (/healthz's detail). */
export const dispatchToken = (opts: { optional?: boolean } = {}) =>
  createMiddleware<AppEnv>(async (c, next) => {
    if (!opts.optional || c.req.header("authorization") !== undefined)
      await requireBearer(c.req.raw, [c.var.d.config.dispatchToken, c.var.d.config.previous.dispatchToken], "DISPATCH_TOKEN");
    await next();
  });

/** A Bearer secret `name` read from the configuration by `secret`; a 404 where it is not set. */
export const secretBearer = (name: string, secret: (config: Config) => string | undefined) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const expected = secret(c.var.d.config);
    if (!expected) throw new HttpError(404, "not found");
    await requireBearer(c.req.raw, expected, name);
    await next();
  });

/** The claim token of the assignment the path names (`:id`): sets `id` and `incarnation`. */
export const claimToken = () =>
  createMiddleware<AppEnv & { Variables: { id: string; incarnation: string } }>(async (c, next) => {
    const id = parseId(c.req.param("id") ?? "");
    c.set("id", id);
    c.set("incarnation", await requireClaimToken(c.req.raw, [c.var.d.config.claimSigningKey, c.var.d.config.previous.claimSigningKey], id));
    await next();
  });

/** HTTP Basic, any user name, STATUS_TOKEN as the password; a 404 where it is not set. */
export const statusPassword = () =>
  createMiddleware<AppEnv>(async (c, next) => {
    const expected = c.var.d.config.statusToken;
    if (!expected) throw new HttpError(404, "not found");
    if (!(await basicPasswordMatches(c.req.raw, expected))) {
      return c.text("the status page needs its password (STATUS_TOKEN; any user name)", 401, {
        "www-authenticate": 'Basic realm="gitea-edge-dispatcher status", charset="UTF-8"',
      });
    }
    await next();
  });
