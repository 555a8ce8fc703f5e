// BACKENDS: backends beyond `pod` and `vm`, each with its name, driver, capacity and settings. Each
// gets its own subject, durable consumer and slot stream, as `pod` and `vm` have. The two of before
// stay described by their own variables (CAPACITY_POD, POD_DRIVER, …), so that a deployment from
// before named backends upgrades with no change.
import { z } from "zod";
import { backendNameSchema } from "../model/assignment.ts";
import { parseJsonVariable } from "../model/json-variable.ts";
import { BACKENDS } from "../model/states.ts";
import type { BackendEnv } from "./driver-module.ts";
import { DRIVERS } from "./drivers.ts";

const namedSchema = z
  .array(
    z.strictObject({
      name: backendNameSchema.refine((n) => !(BACKENDS as readonly string[]).includes(n), {
        message: "is pod or vm, which CAPACITY_POD, POD_DRIVER, … describe: give this backend another name",
      }),
      driver: z.enum(DRIVERS, { message: `must be one of ${DRIVERS.join(", ")}` }),
      capacity: z.number().int().min(0).max(10_000),
      batchSize: z.number().int().min(1).max(1_000).optional(),
      /** The http driver's URL; its token is the secret <NAME>_BACKEND_TOKEN. */
      url: z.url({ protocol: /^https?$/, message: "must be an http(s) URL" }).optional(),
      /** For kubernetes, kubevirt and hetzner: this backend's template, in place of POD_TEMPLATE or VM_TEMPLATE. */
      template: z.record(z.string(), z.unknown()).optional(),
    }),
  )
  .max(32, { message: "holds at most 32 backends" });

export type NamedBackend = z.infer<typeof namedSchema>[number];

/** The secret holding a named http backend's token. */
export const tokenVariable = (name: string) => `${name.toUpperCase()}_BACKEND_TOKEN`;

/** BACKENDS as driver entries (with their templates), every problem named by index and field. */
export function parseNamedBackends(text: string | undefined, env: Record<string, unknown>, problems: string[]): BackendEnv[] {
  if (!text) return [];
  const parsed = parseJsonVariable("BACKENDS", text, namedSchema, problems);
  if (!parsed) return [];
  const seen = new Set<string>();
  return parsed.flatMap((b, i) => {
    if (seen.has(b.name)) {
      problems.push(`BACKENDS[${i}]["name"] ${b.name} is named twice`);
      return [];
    }
    seen.add(b.name);
    if (b.driver !== "http" && b.url) problems.push(`BACKENDS[${i}]["url"] is the http driver's; the ${b.driver} driver takes none (backend ${b.name})`);
    if (b.driver === "http" && b.template) problems.push(`BACKENDS[${i}]["template"] is for the kubernetes, kubevirt and hetzner drivers (backend ${b.name})`);
    const token = env[tokenVariable(b.name)];
    return [
      {
        backend: b.name,
        capacity: b.capacity,
        batchSize: b.batchSize,
        driver: b.driver,
        url: b.url?.replace(/\/+$/, ""),
        token: typeof token === "string" && token.trim() ? token : undefined,
        template: b.template,
        named: i,
      },
    ];
  });
}
