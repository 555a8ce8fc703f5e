// Assignment wire format, version 1. Strict: unknown fields are rejected, nothing secret is carried.
import { z } from "zod";
import { BACKEND_NAME, BACKEND_NAME_RULE, type Backend } from "./states.ts";

/** An assignment names at most this many pools: the ones that can run its job, in the order tried. */
export const MAX_POOLS_PER_JOB = 16;

export const MAX_ASSIGNMENT_BYTES = 16 * 1024;
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const SPIFFE_PATTERN = /^spiffe:\/\/([a-z0-9._-]+)(\/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+$/;

export const assignmentIdSchema = z.string().regex(ID_PATTERN, {
  message: "must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit",
});

/**
 * A repository as Gitea and Forgejo name it, "owner/name": letters, digits, '_', '.' and '-'
 * (their alphaDashDot; Gitea keeps owners to 40 and names to 100). Both parts become KV keys and
 * subject tokens (QUOTAS places, the wait set), with '.' written '=' (names.ts subjectToken): a
 * one-to-one mapping only for these characters, so anything else is refused where it enters
 * rather than failing every batch it later joins.
 */
export const MAX_REPOSITORY_CHARS = 256;
export const repositorySchema = z
  .string()
  .max(MAX_REPOSITORY_CHARS, `at most ${MAX_REPOSITORY_CHARS} characters`)
  .regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, { message: 'must be "owner/name" of letters, digits, "_", "." and "-"' });

const jobSchema = z.strictObject({
  id: z.number().int().nonnegative(),
  runId: z.number().int().nonnegative(),
  attempt: z.number().int().positive(),
  repository: repositorySchema,
  name: z.string().max(256).optional(),
  /** Forgejo: the attempt's handle, which binds the runner to exactly this job (`one-job --handle`). Not a secret. */
  handle: z
    .string()
    .regex(/^[A-Za-z0-9-]{1,64}$/, { message: "must be 1-64 of [A-Za-z0-9-] (a Forgejo job handle)" })
    .optional(),
});

/** A runner pool's name (RUNNER_POOLS): a DNS label. */
export const poolNameSchema = z
  .string()
  .max(63)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, { message: "must be a DNS label (lowercase letters, digits and '-', at most 63)" });

const labelSchema = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[^\s,]+$/, { message: "must not contain spaces or commas" });

/** An assignment's createdAt: RFC 3339 with an offset. */
export const assignmentTime = z.iso.datetime({ offset: true, message: "must be an RFC 3339 timestamp" });

/** A backend's name (BACKEND_NAME): `pod`, `vm`, or a named one of BACKENDS. */
export const backendNameSchema = z.string().regex(BACKEND_NAME, { message: BACKEND_NAME_RULE });

const fields = {
  version: z.literal(1, { message: "unsupported version, expected 1" }),
  id: assignmentIdSchema,
  backend: backendNameSchema,
  workload: z.string().max(2048).regex(SPIFFE_PATTERN, { message: "must be a SPIFFE ID spiffe://<trust-domain>/<path>" }),
  labels: z.array(labelSchema).min(1).max(32),
  /** The pools that may run it, first choice first (the first one's backend is `backend`). */
  pools: z.array(poolNameSchema).min(1).max(MAX_POOLS_PER_JOB).optional(),
  /** A warm runner of its one pool (see pools/maintain.ts), not a job's. */
  warm: z.literal(true).optional(),
  /** A warm runner rebuilt on this parked server of its pool (reuse: "rebuild"), and on no other: never a new one. */
  reuse: z.strictObject({ server: z.number().int().positive() }).optional(),
  job: jobSchema.optional(),
  createdAt: assignmentTime,
};

export const assignmentSchema = z.strictObject(fields);
export type Assignment = z.infer<typeof assignmentSchema>;

/** What a client may POST: workload and createdAt are filled in when omitted. */
export const assignmentRequestSchema = z.strictObject({
  ...fields,
  workload: fields.workload.optional(),
  createdAt: fields.createdAt.optional(),
});
export type AssignmentRequest = z.infer<typeof assignmentRequestSchema>;

export interface FieldIssue {
  field: string;
  message: string;
}

export type Decoded = { ok: true; assignment: Assignment } | { ok: false; issues: FieldIssue[] };

export function toFieldIssues(error: z.ZodError): FieldIssue[] {
  return error.issues.flatMap((issue) => {
    const at = issue.path.map(String);
    // One issue per unknown field, named even when its name is empty.
    if (issue.code === "unrecognized_keys") return issue.keys.map((k) => ({ field: [...at, k || '""'].join("."), message: "unknown field" }));
    return [{ field: at.length ? at.map((p) => p || '""').join(".") : "(body)", message: issue.message }];
  });
}

export function trustDomainOf(workload: string): string | undefined {
  return SPIFFE_PATTERN.exec(workload)?.[1];
}

/** Validates a decoded value; a workload outside `trustDomain` is rejected (the reference's Unmarshal). */
export function validateAssignment(value: unknown, trustDomain: string): Decoded {
  const parsed = assignmentSchema.safeParse(value);
  if (!parsed.success) return { ok: false, issues: toFieldIssues(parsed.error) };
  if (trustDomainOf(parsed.data.workload) !== trustDomain) {
    return { ok: false, issues: [{ field: "workload", message: `must be in trust domain ${trustDomain}` }] };
  }
  return { ok: true, assignment: parsed.data };
}

export function decodeAssignment(data: Uint8Array, trustDomain: string): Decoded {
  if (data.byteLength > MAX_ASSIGNMENT_BYTES) {
    return { ok: false, issues: [{ field: "(body)", message: `larger than ${MAX_ASSIGNMENT_BYTES} bytes` }] };
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(data));
  } catch {
    return { ok: false, issues: [{ field: "(body)", message: "not UTF-8 JSON" }] };
  }
  return validateAssignment(value, trustDomain);
}

/** Canonical bytes: fixed key order, so equal assignments encode equally. */
export function encodeAssignment(a: Assignment): Uint8Array {
  const job = a.job && { id: a.job.id, runId: a.job.runId, attempt: a.job.attempt, repository: a.job.repository, name: a.job.name, handle: a.job.handle };
  const ordered = {
    version: a.version,
    id: a.id,
    backend: a.backend,
    workload: a.workload,
    labels: a.labels,
    pools: a.pools,
    warm: a.warm,
    reuse: a.reuse && { server: a.reuse.server },
    job,
    createdAt: a.createdAt,
  };
  return new TextEncoder().encode(JSON.stringify(ordered));
}

/** Everything but createdAt: two assignments with one id and different fingerprints conflict. */
export function fingerprint(a: Assignment): string {
  const { createdAt: _ignored, ...content } = JSON.parse(new TextDecoder().decode(encodeAssignment(a))) as Assignment;
  return JSON.stringify(content);
}

export function defaultWorkload(trustDomain: string, backend: Backend, id: string): string {
  return `spiffe://${trustDomain}/runner/${backend}/${id}`;
}

/** Fills in the optional fields of a request, then validates the result like any message. */
export function completeAssignment(request: AssignmentRequest, trustDomain: string, now: Date): Decoded {
  return validateAssignment(
    {
      ...request,
      workload: request.workload ?? defaultWorkload(trustDomain, request.backend, request.id),
      createdAt: request.createdAt ?? now.toISOString(),
    },
    trustDomain,
  );
}
