import type { FieldIssue } from "../model/assignment.ts";
import { Conflict, InvalidInput, NotFound, Refused, Unavailable } from "../model/errors.ts";
import { isRetryable } from "../state/kv.ts";

/** What the HTTP layer itself refuses (authentication, body limits); onError maps it to a JSON response. */
export class HttpError extends Error {
  readonly status: 400 | 401 | 403 | 404 | 409 | 413 | 415 | 500 | 503;
  readonly fields: FieldIssue[] | undefined;
  constructor(status: HttpError["status"], message: string, fields?: FieldIssue[]) {
    super(message);
    this.name = "HttpError";
    this.status = status;
    this.fields = fields;
  }
}

/** The one place a domain error becomes a status. */
export const DOMAIN_STATUS = [
  [InvalidInput, 400],
  [Refused, 403],
  [NotFound, 404],
  [Conflict, 409],
  [Unavailable, 503],
] as const;

/** Status, message and fields of an error the API answers as such; undefined for an internal error. */
export function answerFor(err: unknown): { status: HttpError["status"]; message: string; fields?: FieldIssue[] } | undefined {
  if (err instanceof HttpError) return { status: err.status, message: err.message, ...(err.fields ? { fields: err.fields } : {}) };
  for (const [type, status] of DOMAIN_STATUS) {
    if (err instanceof type) return { status, message: err.message, ...(err instanceof InvalidInput && err.fields ? { fields: err.fields } : {}) };
  }
  // NATS trouble or contention: nothing is known to have changed.
  if (isRetryable(err)) return { status: 503, message: "NATS is unavailable; retrying the same request is safe" };
  return undefined;
}
