// The events of a delivery on its way through the table: one line each, with the verdict's delay
// or reason where it has one.
import type { EventName } from "../model/events.ts";
import type { Verdict } from "./decide.ts";
import type { Prepared, ProcessDeps } from "./types.ts";

/** A delivery's assignment id, or its stream sequence when it has none (undecodable). */
export const idOf = (p: Prepared) => p.assignment?.id ?? `seq-${p.msg.seq}`;

export function emit(deps: ProcessDeps, event: EventName, assignment: string, step?: Verdict) {
  const action = step?.action;
  deps.sink.event({
    event,
    assignment,
    backend: deps.backend,
    ...(action?.kind === "nak" && event !== "runner_claimed" ? { retryDelayMs: action.delayMs } : {}),
    ...(action?.kind === "term" ? { reason: action.reason } : {}),
  });
}
