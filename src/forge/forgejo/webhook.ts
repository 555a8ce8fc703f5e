// Forgejo 15's run-level webhooks (`action_run_success|failure|recover`, sent once a whole run is
// final), after the signature was checked on the raw bytes. A run carries no job ids, and the
// waiting list is the source of truth: the delivery makes the poller look now, and the run's jobs
// that left the list end there, with their runners.
import { z } from "zod";
import { toFieldIssues } from "../../model/assignment.ts";
import { InvalidInput } from "../../model/errors.ts";
import { signatureMatches } from "../signature.ts";

export const RUN_EVENTS = ["action_run_success", "action_run_failure", "action_run_recover"] as const;

const id = z.number().int().nonnegative();
/** ActionPayload (forgejo-v15-webhooks.md §1): what we read of it. */
export const actionRunPayload = z.looseObject({
  action: z.enum(["success", "failure", "recover"]),
  run: z.looseObject({
    id,
    status: z.string(),
    repository: z.looseObject({ id, full_name: z.string().max(256) }).nullish(),
  }),
  prior_status: z.string().optional(),
});
export type ActionRunPayload = z.infer<typeof actionRunPayload>;

/** Checks X-Forgejo-Signature (or X-Hub-Signature-256): lowercase hex HMAC-SHA256 of the raw JSON, in constant time. */
export function verifyForgejoSignature(headers: Headers, body: Uint8Array, secret: string | readonly string[]): Promise<boolean> {
  return signatureMatches(headers.get("x-forgejo-signature") || headers.get("x-hub-signature-256")?.replace(/^sha256=/, ""), body, secret);
}

/** The event a delivery names, or undefined when it is not one of the run events. */
export function runEventOf(headers: Headers): (typeof RUN_EVENTS)[number] | undefined {
  const event = headers.get("x-forgejo-event-type") ?? headers.get("x-forgejo-event") ?? "";
  return (RUN_EVENTS as readonly string[]).includes(event) ? (event as (typeof RUN_EVENTS)[number]) : undefined;
}

export function parseActionRun(raw: Uint8Array): ActionRunPayload {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(raw));
  } catch {
    throw new InvalidInput("body is not valid JSON", [{ field: "(body)", message: "not valid JSON" }]);
  }
  const parsed = actionRunPayload.safeParse(value);
  if (!parsed.success) throw new InvalidInput("invalid action_run payload", toFieldIssues(parsed.error));
  return parsed.data;
}
