// The backends a runner can run on, and the states an assignment's record passes through: the
// words every layer speaks, below the NATS names that are built from them.

/** The two backends of the variables from before named backends (CAPACITY_POD, VM_DRIVER, …). */
export const BACKENDS = ["pod", "vm"] as const;
/** A backend's name: `pod`, `vm`, or one of BACKENDS (the variable) named by BACKEND_NAME. */
export type Backend = string;
/**
 * A backend's name: it becomes a subject token, a consumer's and a stream's name part, a KV key
 * part and, upper-cased, a variable's prefix (`<NAME>_BACKEND_TOKEN`); so letters and digits only.
 */
export const BACKEND_NAME = /^[a-z][a-z0-9]{0,15}$/;
export const BACKEND_NAME_RULE = "must be 1-16 lowercase letters and digits, starting with a letter";

export const ASSIGNMENT_STATES = ["received", "capacity_wait", "quota_wait", "backend_pending", "backend_ready", "claimed", "completed", "terminated"] as const;
export type AssignmentState = (typeof ASSIGNMENT_STATES)[number];

/** States a runner reached (claimed) or an assignment ended in: nothing more is asked for it. */
export const SETTLED_STATES: ReadonlySet<AssignmentState> = new Set(["claimed", "completed", "terminated"]);

/** States before admission: no runner was asked for yet, and no slot is held for one. */
export const UNADMITTED_STATES: ReadonlySet<AssignmentState> = new Set(["received", "capacity_wait", "quota_wait"]);

/**
 * The assignment's life: every change of a record's state is one of these, from one of `from`
 * (empty: the record is created so) to `to`. The records store refuses any other change of state
 * (IllegalTransition), so this table is the machine, and docs/architecture.md draws it (a test
 * holds the drawing to the table).
 */
export const TRANSITIONS = [
  { name: "offer", from: [], to: "received" },
  { name: "tombstone", from: [], to: "terminated" },
  // No slot (or it was lost: a lease that ran out, a backend error that gave it back). From an
  // asked-for state only by a delivery that read that state, never one that read the job waiting
  // and lost the race to its turn's write (reconcile/effects.ts).
  { name: "wait", from: ["received", "quota_wait", "backend_pending", "backend_ready"], to: "capacity_wait" },
  { name: "wait_quota", from: ["received", "capacity_wait", "backend_pending", "backend_ready"], to: "quota_wait" },
  { name: "ask", from: ["received", "capacity_wait", "quota_wait"], to: "backend_pending" },
  // Without a forge no registration is stored first: the backend's "ready" may be the first write.
  { name: "ready", from: ["received", "capacity_wait", "quota_wait", "backend_pending"], to: "backend_ready" },
  // A claim timeout, a boot retry, or a runner identity Forgejo no longer has.
  { name: "ask_again", from: ["backend_ready"], to: "backend_pending" },
  // A claim token's holder may claim while the pass that asked for its runner still writes.
  { name: "claim", from: ["received", "capacity_wait", "quota_wait", "backend_pending", "backend_ready"], to: "claimed" },
  // `unclaimed`: the forge says its runner ran without a claim ever reaching us.
  { name: "complete", from: ["received", "capacity_wait", "quota_wait", "backend_pending", "backend_ready", "claimed"], to: "completed" },
  // Cancelled, given up, not needed, moved to a warm runner, or a runner past its lifetime.
  { name: "terminate", from: ["received", "capacity_wait", "quota_wait", "backend_pending", "backend_ready", "claimed"], to: "terminated" },
  // The one end undone: a Forgejo job moved to a warm runner that did not take it.
  { name: "revive", from: ["terminated"], to: "capacity_wait" },
  // A job whose runners never booted, published again by the sweep as a new incarnation.
  { name: "start_over", from: ["terminated"], to: "received" },
] as const satisfies readonly { name: string; from: readonly AssignmentState[]; to: AssignmentState }[];

export type TransitionName = (typeof TRANSITIONS)[number]["name"];

/** Whether a record may go from state `from` to `to` (staying is always allowed). */
export function canTransition(from: AssignmentState, to: AssignmentState): boolean {
  return from === to || TRANSITIONS.some((t) => t.to === to && (t.from as readonly AssignmentState[]).includes(from));
}

/** Ended for good (save `revive` and `start_over`): nothing is asked for it any more. */
export const TERMINAL: ReadonlySet<AssignmentState> = new Set(["completed", "terminated"]);

/** A runner was asked of the backend for it, and has not taken it yet. */
export const ASKED_FOR: ReadonlySet<AssignmentState> = new Set(["backend_pending", "backend_ready"]);

/** Its runner waits for a job: not yet asked for, booting, or up and idle. */
export const WAITING: ReadonlySet<AssignmentState> = new Set([...UNADMITTED_STATES, ...ASKED_FOR]);

/** Not up yet: waiting for admission, or asked of the backend and booting. */
export const BOOTING: ReadonlySet<AssignmentState> = new Set([...UNADMITTED_STATES, "backend_pending"]);

/** A backend's capacity from a map by name; 0 for a name it does not hold, `constructor` included. */
export function capacityOf(capacity: Readonly<Record<Backend, number>>, backend: Backend): number {
  return Object.hasOwn(capacity, backend) ? (capacity[backend] ?? 0) : 0;
}

/** Why a backend an assignment or a pool names takes nothing: pod and vm at capacity 0, any other not in BACKENDS or at capacity 0 there. */
export function whyDisabled(backend: Backend): string {
  return (BACKENDS as readonly string[]).includes(backend) ? `CAPACITY_${backend.toUpperCase()}=0` : "not in BACKENDS, or at capacity 0 there";
}
