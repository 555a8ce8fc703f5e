// The HTTP app's context, shared by its route modules: the request's dispatcher, its request path,
// and the work it leaves to run after the answer.
import type { Context } from "hono";
import type { Dispatcher } from "../dispatcher-types.ts";
import type { RequestPath } from "../request-path.ts";

export type AppEnv = { Bindings: Record<string, unknown>; Variables: { d: Dispatcher; path: RequestPath; background: Promise<unknown>[] } };

/** Work to finish after the answer (waitUntil); a failure is logged, never answered. */
export function inBackground(c: Context<AppEnv>, d: Dispatcher, work: Promise<unknown>, what: string) {
  c.var.background.push(work.catch((err) => d.sink.error(`${what} failed`, { reason: (err as Error).message })));
}
