// The HTTP app's context, shared by its route modules: the request's dispatcher, its request path,
// and the work it leaves to run after the answer.
import type { Context } from "hono";
import type { Invocation } from "../domain/context.ts";
import type { RequestPath } from "../app/request-path.ts";

export type AppEnv = { Bindings: Record<string, unknown>; Variables: { d: Invocation; path: RequestPath; background: Promise<unknown>[] } };

/** What the helpers below use of a request's context, whatever a route's middleware added to it. */
export type AppContext = Pick<Context<AppEnv>, "var">;

/** Work to finish after the answer (waitUntil); a failure is logged, never answered. */
export function inBackground(c: AppContext, d: Invocation, work: Promise<unknown>, what: string) {
  c.var.background.push(work.catch((err) => d.sink.error(`${what} failed`, { reason: (err as Error).message })));
}
