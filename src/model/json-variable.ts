// A configuration variable that holds JSON (RUNNER_POOLS, QUOTAS, …), read by the subsystem the
// variable configures: a lower layer than the configuration that gathers them all.
import type { z } from "zod";

/**
 * A variable that holds JSON checked by `schema`: its value, or undefined with every problem added,
 * each named by the variable and its path (`RUNNER_POOLS[0]["name"] …`).
 */
export function parseJsonVariable<S extends z.ZodType>(name: string, text: string, schema: S, problems: string[]): z.output<S> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    problems.push(`${name} must be JSON`);
    return undefined;
  }
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  for (const i of parsed.error.issues) problems.push(`${name}${i.path.map((p) => `[${JSON.stringify(p)}]`).join("")} ${i.message}`);
  return undefined;
}
