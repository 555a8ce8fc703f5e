// The records a store creates: a job's when its message is first offered, and the tombstone a
// job's end leaves when it came before its queued (records.ts writes them, create-only).
import type { Assignment } from "../model/assignment.ts";
import type { Backend } from "../nats/names.ts";
import type { AssignmentRecord } from "./record.ts";

/** What a record keeps of an assignment's job: where it comes from, for people to read, and what a rerun names. */
export function recordJob(job: {
  repository: string;
  name?: string | undefined;
  id?: number;
  runId?: number;
  attempt?: number;
}): NonNullable<AssignmentRecord["job"]> {
  const rerun = job.id !== undefined && job.runId !== undefined && job.attempt !== undefined ? { id: job.id, run: job.runId, attempt: job.attempt } : {};
  return { repository: job.repository, ...(job.name !== undefined ? { name: job.name } : {}), ...rerun };
}

/** What the forge told of a job beside its assignment, kept in its record (Gitea: the cache's scopes); not part of its content. */
export interface JobFacts {
  branch?: string;
  defaultBranch?: string;
}

/** An assignment's first record, received at `at`; `hash` is its content's (contentHash). */
export function receivedRecord(assignment: Assignment, hash: string, at: string, facts: JobFacts = {}): AssignmentRecord {
  return {
    id: assignment.id,
    backend: assignment.backend,
    contentHash: hash,
    state: "received",
    createdAt: assignment.createdAt,
    receivedAt: at,
    updatedAt: at,
    ...(assignment.job ? { job: { ...recordJob(assignment.job), ...facts } } : {}),
    ...(assignment.job?.handle ? { jobHandle: assignment.job.handle } : {}),
    ...(assignment.warm ? { warm: true as const } : {}),
    ...(assignment.reuse ? { reuse: { server: assignment.reuse.server } } : {}),
  };
}

/** A tombstone: terminated from the start, the same assignment as any content offered under its id. */
export function tombstoneRecord(id: string, backend: Backend, reason: string, at: string, job?: AssignmentRecord["job"]): AssignmentRecord {
  return {
    id,
    backend,
    contentHash: "",
    state: "terminated",
    createdAt: at,
    receivedAt: at,
    updatedAt: at,
    terminatedAt: at,
    reason,
    tombstone: true,
    ...(job ? { job } : {}),
  };
}
