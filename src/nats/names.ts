// Every NATS name the dispatcher uses, in one place.

// The model's names, re-exported where the NATS names always found them.
export {
  ASSIGNMENT_STATES,
  BACKENDS,
  BACKEND_NAME,
  BACKEND_NAME_RULE,
  SETTLED_STATES,
  UNADMITTED_STATES,
  type AssignmentState,
  type Backend,
} from "../model/states.ts";
import type { Backend } from "../model/states.ts";

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

/** The admission bucket of releases before 0.9; provision points it out as unused. */
export function legacyAdmissionBucket(names: NatsNames): string {
  return `${names.stream}_admission`;
}

/** One stream per backend holds its slot leases: one message per admitted assignment. */
export function slotsStream(names: NatsNames, backend: Backend): string {
  return `${names.stream}_slots_${backend}`;
}

/** Subjects of a backend's slot leases: `<prefix>.<id token>`. */
export function slotPrefix(names: NatsNames, backend: Backend): string {
  return `${names.subjectBase}.slots.${backend}`;
}

/** The subject of `id`'s slot lease on a backend. */
export function slotSubject(names: NatsNames, backend: Backend, id: string): string {
  return `${slotPrefix(names, backend)}.${subjectToken(id)}`;
}

/** A runner pool with a cap (RUNNER_POOLS maxRunners) has a slots stream of its own, beside its backend's. */
export function poolSlotsStream(names: NatsNames, pool: string): string {
  return `${names.stream}_pool_${pool}`;
}

export function poolSlotPrefix(names: NatsNames, pool: string): string {
  return `${names.subjectBase}.poolslots.${pool}`;
}

/** One stream holds the runner registrations under way, of every backend. */
export function registrationsStream(names: NatsNames): string {
  return `${names.stream}_registering`;
}

export function registrationPrefix(names: NatsNames, backend: Backend): string {
  return `${names.subjectBase}.registering.${backend}`;
}

export function registrationSubjects(names: NatsNames): string[] {
  return [`${names.subjectBase}.registering.*.*`];
}

/** Jobs waiting for a slot, out of the consumer (fair share, see state/wait-set.ts). */
export function waitStream(names: NatsNames): string {
  return `${names.stream}_waiting`;
}

/** Subjects of a backend's waiting jobs: `<prefix>.<owner>.<repository>`. */
export function waitPrefix(names: NatsNames, backend: Backend): string {
  return `${names.subjectBase}.waiting.${backend}`;
}

/** Assignment ids may hold dots, which separate subject tokens; '=' is never in an id. */
export function subjectToken(id: string): string {
  return id.replaceAll(".", "=");
}

export function idOfToken(token: string): string {
  return token.replaceAll("=", ".");
}

/** Assignment ids may hold dots that a KV key cannot end with or repeat. */
export function recordKey(id: string): string {
  return `${RECORD_PREFIX}.${subjectToken(id)}`;
}
export const RECORD_PREFIX = "a";

/** A teardown that failed, kept in the records bucket beside the records until a tick retries it. */
export function teardownKey(id: string): string {
  return `${TEARDOWN_PREFIX}.${subjectToken(id)}`;
}
export const TEARDOWN_PREFIX = "t";

/** A job lost with its interrupted runner, kept until it is rerun (or known to need a person): state/reruns.ts. */
export function rerunKey(id: string): string {
  return `${RERUN_PREFIX}.${subjectToken(id)}`;
}
export const RERUN_PREFIX = "rr";
/** The execution a rerun asked by the dispatcher made (its assignment id): which entry asked it, and how many reruns its job has had. */
export function rerunOfKey(next: string): string {
  return `rr-next.${subjectToken(next)}`;
}

/** A one-time bootstrap entry (state/bootstraps.ts), keyed by its token's SHA-256 (base64url, key-safe). */
export function bootstrapKey(tokenHash: string): string {
  return `${BOOTSTRAP_PREFIX}.${tokenHash}`;
}
export const BOOTSTRAP_PREFIX = "boot";

/** A driver's note of one assignment's workload (the hetzner driver's server id), in the records bucket. */
export function driverNoteKey(backend: string, id: string): string {
  return `${DRIVER_NOTE_PREFIX}.${backend}.${subjectToken(id)}`;
}
export const DRIVER_NOTE_PREFIX = "dn";

/** Which assignment (by label) a driver's server runs now: a rebuilt server runs another than its name says. */
export const driverServerKey = (backend: string, serverId: number) => `${DRIVER_NOTE_PREFIX}-srv.${backend}.${serverId}`;
/** Every server index key of `backend` (a pattern for kv.keys). */
export const driverServerKeys = (backend: string) => `${DRIVER_NOTE_PREFIX}-srv.${backend}.*`;
/** A finished server kept for its pool's next job within its paid hour (reuse: "rebuild"). */
export const parkedKey = (backend: string, pool: string, serverId: number) => `${DRIVER_NOTE_PREFIX}-park.${backend}.${pool}.${serverId}`;
export const parkedPrefix = (backend: string, pool?: string) => `${DRIVER_NOTE_PREFIX}-park.${backend}.${pool ?? "*"}`;

/** What a driver keeps of its cloud API's rate limit, one per settings (a Hetzner project's token). */
export const driverBudgetKey = (settingsKey: string) => `${DRIVER_NOTE_PREFIX}-budget.${settingsKey}`;

/** A pool's warm position (see state/warm-slots.ts), kept in the records bucket. */
export function warmKey(pool: string, index: number): string {
  return `${WARM_PREFIX}.${pool}.${index}`;
}
export const WARM_PREFIX = "w";

/** A pool's job start-up time histogram (see state/startup-times.ts), kept in the records bucket. */
export function startupKey(pool: string): string {
  return `${STARTUP_PREFIX}.${pool}`;
}
export const STARTUP_PREFIX = "h";

/** A Forgejo job handle bound to its assignment (see state/handles.ts), kept in the records bucket. */
export function handleKey(handle: string): string {
  return `${HANDLE_PREFIX}.${handle}`;
}
export const HANDLE_PREFIX = "fh";

/** The Forgejo poller's health (see state/forge-health.ts), kept in the records bucket. */
export const FORGE_HEALTH_KEY = "fp";

/**
 * The Actions cache's index (src/cache/kv-index.ts), in the records bucket, under its repository:
 * entries by id, names (scope, version and key: one winner each) and uploaded parts. A scope and a
 * key are written base64url, so that any character of theirs stays within one token. The
 * bucket's TTL is the cache's: an entry not used (rewritten) for 7 days is gone.
 */
export const CACHE_PREFIX = "ca";
const cacheRepo = (repo: string) => `${CACHE_PREFIX}.${subjectToken(repo)}`;
export const cacheEntryKey = (repo: string, id: number) => `${cacheRepo(repo)}.e.${id}`;
export const cacheEntriesOf = (repo: string) => `${cacheRepo(repo)}.e`;
export const cacheNameKey = (repo: string, scope64: string, version: string, key64: string) => `${cacheRepo(repo)}.n.${scope64}.${version}.${key64}`;
export const cacheNamesOf = (repo: string, scope64: string, version: string) => `${cacheRepo(repo)}.n.${scope64}.${version}`;
export const cachePartKey = (repo: string, id: number, part: number) => `${cacheRepo(repo)}.p.${id}.${part}`;
export const cachePartsOf = (repo: string, id: number) => `${cacheRepo(repo)}.p.${id}`;
/** The cache's figures of one repository (src/cache/figures.ts): counters and the upkeep's gauges. */
export const CACHE_FIGURES_PREFIX = `${CACHE_PREFIX}-f`;
export const cacheFiguresKey = (repo: string) => `${CACHE_FIGURES_PREFIX}.${subjectToken(repo)}`;
