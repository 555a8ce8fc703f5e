// Which backend and runner labels serve a job: Gitea's own matching rule, first route wins.
import { z } from "zod";
import { BACKENDS } from "../../names.ts";

export const routeSchema = z.strictObject({
  backend: z.enum(BACKENDS),
  labels: z.array(z.string().min(1).max(256).regex(/^[^\s,]+$/, { message: "must not contain spaces or commas" })).min(1).max(32),
});
export const routesSchema = z.array(routeSchema).min(1, { message: "must list at least one route" });
export type Route = z.infer<typeof routeSchema>;

/** The name part of a runner label: "ubuntu-latest:docker://node:20" → "ubuntu-latest". */
export function labelName(label: string): string {
  const i = label.indexOf(":");
  return i < 0 ? label : label.slice(0, i);
}

/** A job matches a route when every runs-on label of the job is among the route's label names. */
export function matchRoute(routes: readonly Route[], runsOn: readonly string[]): Route | undefined {
  if (!runsOn.length) return undefined;
  return routes.find((route) => {
    const names = new Set(route.labels.map(labelName));
    return runsOn.every((label) => names.has(label));
  });
}
