import type { FieldIssue } from "../assignment.ts";

/** The one error type handlers throw; onError maps it to a JSON response. */
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
