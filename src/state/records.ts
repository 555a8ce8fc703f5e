// The durable record of each assignment: what the reference kept in its in-memory claim
// registry, in JetStream KV with compare-and-set transitions.
import type { KV } from "@nats-io/kv";
import { fingerprint, type Assignment } from "../model/assignment.ts";
import { recordKey, type AssignmentState, type Backend } from "../nats/names.ts";
import { canTransition } from "../model/states.ts";
import { IllegalTransition } from "../model/errors.ts";
import { casUpdateRevision, casWrite, readJson, type Versioned } from "./kv.ts";

/** Who it is, where it was queued and when it came: every record has these. */
export interface RecordCore {
  id: string;
  backend: Backend;
  /** SHA-256 of the assignment's content without createdAt: equal means "the same assignment". */
  contentHash: string;
  createdAt: string;
  receivedAt: string;
  updatedAt: string;
  /** A cron pass holds the message until then and acks it itself once claimed (see hold.ts). */
  heldUntil?: string;
  /**
   * Left by a job's `completed` that came before its `queued` (Gitea delivers from a queue): the
   * job is over, so its late `queued` must provision nothing. Counts as the same assignment as any
   * content offered under its id, and is terminated from the start.
   */
  tombstone?: true;
  /** Where the job comes from, for people looking at the status page (never a secret). */
  job?: { repository: string; name?: string };
}

/** Its runner: the identity registered for it, and its boot. */
export interface RunnerPart {
  /** The runner registered for this assignment; its credentials are sealed (AES-256-GCM). */
  runner?: RunnerRef;
  /** When its runner was first asked of the backend, this attempt (a boot is timed from it). */
  askedAt?: string;
  readyAt?: string;
  /** Runners asked for it before that did not boot within their pool's bootTimeoutMs. */
  bootAttempts?: number;
  /** Its runners never booted (MAX_BOOT_ATTEMPTS): the sweep may publish its job again after a while. */
  gaveUpAt?: string;
}

/** Where it was admitted, and whether its turn came. */
export interface PlacementPart {
  /**
   * The pool that admitted it, and that pool's backend (where its runner runs, which a spilled
   * job's is not the backend whose queue it waits in). Kept from the first admission on: its
   * runner may exist there.
   */
  placement?: { pool: string; backend: Backend };
  /** Its turn in the wait set came (fair share): admitted as it comes, ahead of those still waiting. */
  chosen?: true;
}

/** Its runner stands in a pool's warm position. */
export interface WarmPart {
  /**
   * Its runner is kept warm for its pool, waiting for any job: a warm runner's own assignment, or
   * a job's whose runner another runner beat to its job. Its wait for a claim is bounded by the
   * pool's maxIdleMs (pools/maintain.ts replaces it then), not by CLAIM_TIMEOUT_MS.
   */
  warm?: true;
}

/** Forgejo: the job handles it is bound to. */
export interface ForgeBindingPart {
  /**
   * The job attempt a warm runner was given (its runner asks for the handle, then runs
   * `one-job --handle`). Not `job`: the warm runner was admitted without one. Its repository is the
   * one the runner counts to (jobRepository): QUOTAS places taken when it was given, fair share,
   * the owner rows and usage.
   */
  bound?: { job: number; attempt: number; handle: string; repository: string; at: string };
  /** Its own job attempt's handle (from the assignment). */
  jobHandle?: string;
}

/** Its runner ran another job than this one (a swap). */
export interface SwapPart {
  /**
   * That job's own assignment id. That assignment's runner serves this one's job in turn (Gitea
   * hands each runner the oldest job it can take).
   */
  took?: string;
}

type NotEnded = { completedAt?: undefined; terminatedAt?: undefined; reason?: undefined; movedTo?: undefined };

/**
 * Where it stands (model/states.ts): each state with what it must have and what it cannot, so
 * that a record claimed without a time, or waiting with an end's reason, cannot be written.
 */
export type Standing =
  | ({ state: "received" | "capacity_wait" | "quota_wait" | "backend_pending" | "backend_ready"; claimedAt?: undefined } & NotEnded)
  | ({ state: "claimed"; claimedAt: string } & NotEnded)
  | { state: "completed"; claimedAt?: string; completedAt: string; terminatedAt?: undefined; reason?: undefined; movedTo?: undefined }
  | {
      state: "terminated";
      claimedAt?: string;
      completedAt?: undefined;
      terminatedAt: string;
      reason: string;
      /**
       * Forgejo: ended while it waited its turn because its job went to this warm runner (move.ts).
       * The one end that is undone: should that runner not take the job, the record waits again.
       */
      movedTo?: string;
    };

/** Every state of the machine has its standing (a compile-time check). */
export const STANDING_COVERS_EVERY_STATE: Exclude<AssignmentState, Standing["state"]> extends never ? true : never = true;

/** An assignment's record: its core, where it stands, and its typed parts. */
export type AssignmentRecord = RecordCore & Standing & RunnerPart & PlacementPart & WarmPart & ForgeBindingPart & SwapPart;

/** Where an assignment's runner runs and its slots are held: its pool's, else its own backend. */
export function placementOf(r: Pick<AssignmentRecord, "backend" | "placement" | "job" | "bound">): { backend: Backend; pool?: string; repository?: string } {
  return { ...(r.placement ?? { backend: r.backend }), ...placedRepository(jobRepository(r)) };
}

/** The repository a runner counts to: its own job's, or the one a warm runner was given (Forgejo's `bound`). */
export function jobRepository(r: Pick<AssignmentRecord, "job" | "bound">): string | undefined {
  return r.job?.repository ?? r.bound?.repository;
}

/** A job's repository as a placement carries it (lower case): a release gives its QUOTAS places back. */
export function placedRepository(repository: string | undefined): { repository?: string } {
  const lower = repository?.toLowerCase();
  return lower?.includes("/") ? { repository: lower } : {};
}

export interface RunnerRef {
  id: number;
  name: string;
  registeredAt: string;
  /** base64(iv ‖ ciphertext) of the `.runner` JSON, bound to the assignment id. */
  sealed: string;
  /** The scope key it was registered at (gitea/scope.ts), when not GITEA_SCOPE. */
  scope?: string;
  /** Forgejo: the URL and scope it is registered at (forgejo/warm.ts forgejoPlace). */
  place?: string;
}

/** Its Gitea runner, where Gitea keeps it; undefined when none was registered. */
export function runnerAt(r: AssignmentRecord): { id: number; scope?: string } | undefined {
  return r.runner ? { id: r.runner.id, ...(r.runner.scope ? { scope: r.runner.scope } : {}) } : undefined;
}

export interface OfferResult {
  result: "new" | "same" | "conflict";
  record: AssignmentRecord;
  revision: number;
}

export type Transition = (record: AssignmentRecord) => AssignmentRecord | undefined;

/** Assignment records. Offer is idempotent for equal content and reports a conflict otherwise. */
export interface RecordStore {
  offer(assignment: Assignment): Promise<OfferResult>;
  /** Leaves a terminated tombstone for an id that has no record; returns null when one exists. */
  tombstone(id: string, backend: Backend, reason: string, job?: AssignmentRecord["job"]): Promise<AssignmentRecord | null>;
  get(id: string): Promise<AssignmentRecord | null>;
  /** Applies `change` atomically; returns the record after it, or null when there is none. */
  update(id: string, change: Transition): Promise<AssignmentRecord | null>;
  /**
   * The record as the bucket's leader has it. Other reads may be answered by any replica, and one
   * that lags (a node just restarted) shows an older record: fine for most decisions, not for
   * the one to register a runner.
   */
  getFromLeader(id: string): Promise<Versioned<AssignmentRecord> | null>;
  /** Records of many assignments in one request. */
  getMany(ids: readonly string[]): Promise<Map<string, Versioned<AssignmentRecord>>>;
  /** Like update, but first tries one write at the revision the caller already read; tells the revision after. */
  updateFrom(known: Versioned<AssignmentRecord>, change: Transition): Promise<Versioned<AssignmentRecord> | null>;
}

export async function contentHash(assignment: Assignment): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(fingerprint(assignment)));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Which life of an id a record is: its creation time, in base 36. An id used again after its
 * record expired gets another, and so do its claim tokens (see claimToken).
 */
export function incarnationOf(record: Pick<AssignmentRecord, "receivedAt">): string {
  return Date.parse(record.receivedAt).toString(36);
}

/** What a record keeps of an assignment's job: where it comes from, for people to read. */
export function recordJob(job: { repository: string; name?: string | undefined }): NonNullable<AssignmentRecord["job"]> {
  return { repository: job.repository, ...(job.name !== undefined ? { name: job.name } : {}) };
}

/** Whether content of hash `hash` is the assignment `record` stands for (a tombstone stands for any). */
export function sameContent(record: AssignmentRecord, hash: string): boolean {
  return record.tombstone === true || record.contentHash === hash;
}

export function createRecordStore(
  kv: KV,
  now: () => number,
  readMany: (keys: string[]) => Promise<Map<string, Versioned<AssignmentRecord>>>,
  /** The same bucket bound without direct gets: reads go to its leader. */
  leaderKv: KV = kv,
): RecordStore {
  const iso = () => new Date(now()).toISOString();
  // Every write of a changed state is a transition of the machine (model/states.ts), or is refused unwritten.
  const checked =
    (change: Transition): Transition =>
    (current) => {
      const next = change(current);
      if (next && !canTransition(current.state, next.state))
        throw new IllegalTransition(`assignment ${current.id}: no transition from ${current.state} to ${next.state}`);
      return next;
    };
  const updateVersioned = async (id: string, unchecked: Transition): Promise<Versioned<AssignmentRecord> | null> => {
    const change = checked(unchecked);
    const { result, revision } = await casUpdateRevision<AssignmentRecord, AssignmentRecord | null>(
      kv,
      recordKey(id),
      (current) => {
        if (!current) return { value: undefined, result: null };
        const next = change(current.value);
        if (!next) return { value: undefined, result: current.value };
        const stamped = { ...next, updatedAt: iso() };
        return { value: stamped, result: stamped };
      },
      { leader: leaderKv },
    );
    return result && revision !== undefined ? { value: result, revision } : null;
  };
  return {
    async offer(assignment) {
      const hash = await contentHash(assignment);
      const { result, revision } = await casUpdateRevision<AssignmentRecord, Omit<OfferResult, "revision">>(
        kv,
        recordKey(assignment.id),
        (current) => {
          if (current) return { value: undefined, result: { result: sameContent(current.value, hash) ? "same" : "conflict", record: current.value } };
          const at = iso();
          const record: AssignmentRecord = {
            id: assignment.id,
            backend: assignment.backend,
            contentHash: hash,
            state: "received",
            createdAt: assignment.createdAt,
            receivedAt: at,
            updatedAt: at,
            ...(assignment.job ? { job: recordJob(assignment.job) } : {}),
            ...(assignment.job?.handle ? { jobHandle: assignment.job.handle } : {}),
            ...(assignment.warm ? { warm: true as const } : {}),
          };
          return { value: record, result: { result: "new", record } };
        },
        { assumeAbsent: true, leader: leaderKv },
      );
      return { ...result, revision: revision! };
    },
    async tombstone(id, backend, reason, job) {
      const { result } = await casUpdateRevision<AssignmentRecord, AssignmentRecord | null>(
        kv,
        recordKey(id),
        (current) => {
          if (current) return { value: undefined, result: null };
          const at = iso();
          const record: AssignmentRecord = {
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
          return { value: record, result: record };
        },
        { assumeAbsent: true, leader: leaderKv },
      );
      return result;
    },
    async get(id) {
      return (await readJson<AssignmentRecord>(kv, recordKey(id)))?.value ?? null;
    },
    getFromLeader: (id) => readJson<AssignmentRecord>(leaderKv, recordKey(id)),
    async update(id, change) {
      return (await updateVersioned(id, change))?.value ?? null;
    },
    async getMany(ids) {
      const byKey = await readMany(ids.map(recordKey));
      return new Map([...byKey.values()].map((v) => [v.value.id, v]));
    },
    async updateFrom(known, unchecked) {
      const change = checked(unchecked);
      const next = change(known.value);
      if (!next) return known;
      const stamped = { ...next, updatedAt: iso() };
      const written = await casWrite(kv, recordKey(known.value.id), stamped, known.revision);
      return written !== null ? { value: stamped, revision: written } : updateVersioned(known.value.id, change);
    },
  };
}
