// Every NATS name the dispatcher uses, in one place.

export const BACKENDS = ["pod", "vm"] as const;
export type Backend = (typeof BACKENDS)[number];

export const ASSIGNMENT_STATES = [
  "received",
  "capacity_wait",
  "backend_pending",
  "backend_ready",
  "claimed",
  "completed",
  "terminated",
] as const;
export type AssignmentState = (typeof ASSIGNMENT_STATES)[number];

export interface NatsNames {
  stream: string;
  subjectBase: string;
}

export function assignmentSubject(names: NatsNames, backend: Backend): string {
  return `${names.subjectBase}.${backend}`;
}

export function streamSubjects(names: NatsNames): string[] {
  return [`${names.subjectBase}.*`];
}

/** The durable consumer of a backend is named after it, as in the reference. */
export function consumerName(backend: Backend): string {
  return backend;
}

/** KV buckets are named after the stream so that several deployments can share one account. */
export function recordsBucket(names: NatsNames): string {
  return `${names.stream}_records`;
}

export function admissionBucket(names: NatsNames): string {
  return `${names.stream}_admission`;
}

/** Assignment ids may hold dots that a KV key cannot end with or repeat; '=' is never in an id. */
export function recordKey(id: string): string {
  return `a.${id.replaceAll(".", "=")}`;
}

export function admissionKey(backend: Backend): string {
  return `slots.${backend}`;
}
