// What crosses the RPC between a Worker invocation and the gateway object: one call per request,
// answered with the value or a domain error as plain data, and the log lines the call produced
// (the invocation writes them, so that they stay with the request that caused them).
import type { FieldIssue } from "../model/assignment.ts";
import { Conflict, InvalidInput, NotFound, Refused, Unavailable } from "../model/errors.ts";
import type { BatchSummary, DispatchEvent, EventSink } from "../model/events.ts";
import type { PathOp, RequestPath } from "../app/request-path.ts";
import { isRetryable } from "../state/kv.ts";

/** One request path call: the method's name and its arguments. */
export type GatewayCall = { [K in PathOp]: { op: K; args: Parameters<RequestPath[K]> } }[PathOp];

export type LogLine =
  | { kind: "event"; event: DispatchEvent }
  | { kind: "summary"; summary: BatchSummary }
  | { kind: "error"; message: string; fields?: Record<string, string | number | undefined> };

export type WireError = { kind: "InvalidInput" | "NotFound" | "Conflict" | "Refused" | "Unavailable" | "Internal"; message: string; fields?: FieldIssue[] };

export type GatewayAnswer = ({ ok: true; value: unknown } | { ok: false; error: WireError }) & { logs: LogLine[] };

/** A sink that keeps what it is given, for the caller to replay. */
export function collectingSink(): EventSink & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  return {
    lines,
    event: (event) => void lines.push({ kind: "event", event }),
    summary: (summary) => void lines.push({ kind: "summary", summary }),
    error: (message, fields) => void lines.push({ kind: "error", message, ...(fields ? { fields } : {}) }),
  };
}

export function replayLogs(lines: readonly LogLine[], sink: EventSink): void {
  for (const l of lines) {
    if (l.kind === "event") sink.event(l.event);
    else if (l.kind === "summary") sink.summary(l.summary);
    else sink.error(l.message, l.fields);
  }
}

const KINDS = [
  ["InvalidInput", InvalidInput],
  ["NotFound", NotFound],
  ["Conflict", Conflict],
  ["Refused", Refused],
  ["Unavailable", Unavailable],
] as const;

/** What went wrong, for a log line: the error's name and the start of its message. */
export function reasonOf(err: unknown): string {
  return `${(err as Error)?.name}: ${String((err as Error)?.message)}`.slice(0, 200);
}

/**
 * A domain error as data. NATS trouble (a deadline passed, the connection broke) is Unavailable,
 * saying what the call left undone; anything else is Internal, named only.
 */
export function toWire(err: unknown, op: PathOp): WireError {
  for (const [kind, type] of KINDS) {
    if (err instanceof type) return { kind, message: err.message, ...(err instanceof InvalidInput && err.fields ? { fields: err.fields } : {}) };
  }
  if (isRetryable(err)) return { kind: "Unavailable", message: UNAVAILABLE[op] };
  return { kind: "Internal", message: (err as Error)?.name ?? "Error" };
}

/**
 * What a call that NATS did not answer in time left behind. The work may still go on after the
 * deadline (a publish on its way, a claim's write): so no message claims that nothing happened,
 * and each says why trying again is safe.
 */
const UNAVAILABLE: Record<PathOp, string> = {
  publish: "NATS did not confirm the publish in time; the assignment may still be queued. Retrying with the same id is safe: it is deduplicated by id.",
  webhook:
    "NATS did not confirm in time; the job may still be queued. Redelivering it is safe (deduplicated by job and attempt); the sweep also finds it while it is queued.",
  record: "NATS did not confirm the record in time; it is written at the message's first delivery if it was not",
  get: "NATS did not answer in time; retrying the same request is safe",
  claim: "NATS did not confirm the claim in time; it may still be recorded. Retrying the same request is safe.",
  complete: "NATS did not confirm the completion in time; it may still be recorded. Retrying the same request is safe.",
  reconcile: "NATS did not answer in time",
};

export function fromWire(w: WireError): Error {
  if (w.kind === "InvalidInput") return new InvalidInput(w.message, w.fields);
  const found = KINDS.find(([kind]) => kind === w.kind);
  return found ? new found[1](w.message) : new GatewayInternalError(`the gateway failed: ${w.message}`);
}

/** A bug in the gateway's call, not a refusal: the request answers 500. */
export class GatewayInternalError extends Error {
  override readonly name = "GatewayInternalError";
}
