// RUNNER_POOLS: the runner pools, each a backend, the labels of its runners, the shape of its
// workload, its caps, its warm runners and their lifetimes. Every problem is named with its path
// (`RUNNER_POOLS[1].schedule[0].cron …`). RUNS_ON_ROUTES, the older form, becomes one pool per route.
import { z } from "zod";
import { parseJsonVariable } from "../model/json-variable.ts";
import { backendNameSchema, poolNameSchema } from "../model/assignment.ts";
import { routeSchema, routesSchema, type Route } from "./routes.ts";
import { parseCron, type Cron } from "./schedule.ts";

const HOUR_MS = 3_600_000;
const SCOPE_TEXT = /^(admin|(org|user):[A-Za-z0-9_.-]+|repo:[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)$/;

const timeZone = z.string().refine(
  (tz) => {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone: tz });
      return true;
    } catch {
      return false;
    }
  },
  { message: "must be an IANA time zone (Europe/Berlin, UTC)" },
);

const cron = z.string().transform((text, ctx): Cron => {
  try {
    return parseCron(text);
  } catch (err) {
    ctx.addIssue({ code: "custom", message: `is not a cron expression: ${(err as Error).message}` });
    return z.NEVER;
  }
});

const windowSchema = z.strictObject({ cron, timeZone: timeZone.default("UTC"), minIdle: z.number().int().min(0) });

const poolSchema = z
  .strictObject({
    name: poolNameSchema,
    backend: backendNameSchema,
    labels: routeSchema.shape.labels,
    /** A partial Pod, VirtualMachineInstance or Hetzner create-server body (its backend's driver's), merged over the backend's default. */
    template: z.record(z.string(), z.unknown()).optional(),
    /** The hetzner driver's: a finished job's server is kept for the pool's next job within its paid hour, and rebuilt for it. */
    reuse: z.enum(["rebuild"], { message: 'must be "rebuild"' }).optional(),
    /**
     * With reuse: a finished job's server is rebuilt at once as a warm runner, given up this long
     * before its paid hour ends (deleted then, before the next hour is billed).
     */
    warmUntil: z
      .number()
      .int()
      .min(2 * 60_000)
      .max(30 * 60_000)
      .default(4 * 60_000),
    /**
     * A new job waits up to this long (from its queued) for a warm runner of the pool still
     * booting (a server being rebuilt) rather than ask for a server of its own; 0: only an idle one.
     */
    waitForReuseMs: z
      .number()
      .int()
      .min(0)
      .max(10 * 60_000)
      .default(0),
    /** A cloud driver's placements, tried in order where one has no room: hetzner's (server_type, location), ec2's (InstanceType, SubnetId). */
    candidates: z
      .array(z.record(z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/, { message: "must be a field name" }), z.string().min(1).max(255)))
      .min(1)
      .max(8)
      .optional(),
    /** The ec2 driver's: Spot or on-demand instances. */
    market: z.enum(["spot", "on-demand"], { message: 'must be "spot" or "on-demand"' }).optional(),
    /** The ec2 driver's: where no Spot candidate has room, its candidates are tried again on-demand. */
    spotFallback: z.enum(["on-demand"], { message: 'must be "on-demand"' }).optional(),
    /** This pool's cap; unset, only the backend's CAPACITY_* caps it. */
    maxRunners: z.number().int().min(1).optional(),
    minIdle: z.number().int().min(0).default(0),
    schedule: z.array(windowSchema).max(16).optional(),
    maxIdleMs: z.number().int().min(60_000).default(HOUR_MS),
    bootTimeoutMs: z
      .number()
      .int()
      .min(10_000)
      .default(10 * 60_000),
    maxLifetimeMs: z
      .number()
      .int()
      .min(60_000)
      .default(6 * HOUR_MS),
    priority: z.number().int().min(0).max(1_000_000).default(100),
    /** Where all its runners are registered, as GITEA_SCOPE is written; unset, RUNNER_SCOPE decides for job runners and GITEA_SCOPE for warm ones. */
    scope: z.string().regex(SCOPE_TEXT, { message: "must be admin, org:<name>, user:<name> or repo:<owner>/<name>" }).optional(),
  })
  .superRefine((pool, ctx) => {
    const cap = pool.maxRunners ?? Infinity;
    if (pool.minIdle > cap) ctx.addIssue({ code: "custom", path: ["minIdle"], message: `must be at most maxRunners (${cap})` });
    pool.schedule?.forEach((w, i) => {
      if (w.minIdle > cap) ctx.addIssue({ code: "custom", path: ["schedule", i, "minIdle"], message: `must be at most maxRunners (${cap})` });
    });
    if (pool.maxLifetimeMs <= pool.bootTimeoutMs)
      ctx.addIssue({ code: "custom", path: ["maxLifetimeMs"], message: `must be longer than bootTimeoutMs (${pool.bootTimeoutMs})` });
  });

export const poolsSchema = z
  .array(poolSchema)
  .min(1, { message: "must list at least one pool" })
  .superRefine((pools, ctx) => {
    const seen = new Map<string, number>();
    pools.forEach((p, i) => {
      const first = seen.get(p.name);
      if (first !== undefined) ctx.addIssue({ code: "custom", path: [i, "name"], message: `${JSON.stringify(p.name)} is the name of pool ${first} too` });
      else seen.set(p.name, i);
    });
  });

export type Pool = z.infer<typeof poolSchema>;

/**
 * The pools of the configuration, or undefined with `problems` added, each naming the pool.
 * RUNS_ON_ROUTES (`routes`), the older form, is one pool per route; setting both is a problem.
 */
export function parsePools(raw: string | undefined, routes: string | undefined, problems: string[]): Pool[] | undefined {
  const set = (v: string | undefined): v is string => v !== undefined && v.trim() !== "";
  if (set(raw) && set(routes)) {
    problems.push("RUNNER_POOLS and RUNS_ON_ROUTES are both set: use RUNNER_POOLS alone (each route is a pool)");
    return undefined;
  }
  if (set(routes)) {
    const parsed = parseJsonVariable("RUNS_ON_ROUTES", routes, routesSchema, problems);
    return parsed && poolsOfRoutes(parsed);
  }
  if (!set(raw)) return undefined;
  const before = problems.length;
  const pools = parseJsonVariable("RUNNER_POOLS", raw, poolsSchema, problems);
  if (problems.length > before) nameThePools(raw, problems, before);
  return pools;
}

/** Adds `(pool "<name>")` to each problem of a pool whose name can be read. */
function nameThePools(raw: string, problems: string[], from: number): void {
  let listed: unknown;
  try {
    listed = JSON.parse(raw);
  } catch {
    return;
  }
  if (!Array.isArray(listed)) return;
  for (let i = from; i < problems.length; i++) {
    const at = /^RUNNER_POOLS\[(\d+)\]/.exec(problems[i]!);
    const name = at ? (listed[Number(at[1])] as { name?: unknown } | undefined)?.name : undefined;
    if (typeof name === "string" && name.length <= 63) problems[i] += ` (pool ${JSON.stringify(name)})`;
  }
}

/** RUNS_ON_ROUTES as pools: one per route, in its order, the backend's default template, no warm runners. */
export function poolsOfRoutes(routes: readonly Route[]): Pool[] {
  return routes.map((r, i) => poolSchema.parse({ name: `route-${i}`, backend: r.backend, labels: r.labels, priority: i }));
}
