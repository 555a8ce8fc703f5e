// The backends a runner can run on, and the states an assignment's record passes through: the
// words every layer speaks, below the NATS names that are built from them.

export const BACKENDS = ["pod", "vm"] as const;
export type Backend = (typeof BACKENDS)[number];

export const ASSIGNMENT_STATES = ["received", "capacity_wait", "quota_wait", "backend_pending", "backend_ready", "claimed", "completed", "terminated"] as const;
export type AssignmentState = (typeof ASSIGNMENT_STATES)[number];

/** States a runner reached (claimed) or an assignment ended in: nothing more is asked for it. */
export const SETTLED_STATES: ReadonlySet<AssignmentState> = new Set(["claimed", "completed", "terminated"]);

/** States before admission: no runner was asked for yet, and no slot is held for one. */
export const UNADMITTED_STATES: ReadonlySet<AssignmentState> = new Set(["received", "capacity_wait", "quota_wait"]);
