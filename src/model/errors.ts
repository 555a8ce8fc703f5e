// The domain's refusals. Domain modules throw these, never an HTTP status; the HTTP layer maps
// each to its status once (see http/errors.ts), and the OpenAPI document lists them per route.
import type { FieldIssue } from "./assignment.ts";

/** The input breaks a rule; `fields` names what is wrong. */
export class InvalidInput extends Error {
  override readonly name = "InvalidInput";
  readonly fields: FieldIssue[] | undefined;
  constructor(message: string, fields?: FieldIssue[]) {
    super(message);
    this.fields = fields;
  }
}

/** No such assignment. */
export class NotFound extends Error {
  override readonly name = "NotFound";
}

/** The request contradicts what is stored: other content under the same id, or a state that does not allow it. */
export class Conflict extends Error {
  override readonly name = "Conflict";
}

/** Refused for who asks: a runner that is not the one registered for the assignment. */
export class Refused extends Error {
  override readonly name = "Refused";
}

/** A dependency (NATS, Gitea) could not be reached or did not confirm; nothing changed, and trying again is safe. */
export class Unavailable extends Error {
  override readonly name = "Unavailable";
}

/** A change of a record's state that no transition of the machine names (model/states.ts): a bug, refused before it is written. */
export class IllegalTransition extends Error {
  override readonly name = "IllegalTransition";
}
