// RUNS_ON_ROUTES, the form pools had before RUNNER_POOLS (each route is a pool: config.ts), and
// runner label syntax, as Gitea and Forgejo both read it.
import { z } from "zod";
import { backendNameSchema } from "../model/assignment.ts";

export const routeSchema = z.strictObject({
  backend: backendNameSchema,
  labels: z
    .array(
      z
        .string()
        .min(1)
        .max(256)
        .regex(/^[^\s,]+$/, { message: "must not contain spaces or commas" }),
    )
    .min(1)
    .max(32),
});
export const routesSchema = z.array(routeSchema).min(1, { message: "must list at least one route" });
export type Route = z.infer<typeof routeSchema>;

/** The name part of a runner label: "ubuntu-latest:docker://node:20" → "ubuntu-latest". */
export function labelName(label: string): string {
  const i = label.indexOf(":");
  return i < 0 ? label : label.slice(0, i);
}
