// Structured JSON logs. An event names an assignment by id and backend only: never a payload,
// token, label or workload.
import type { Backend } from "./states.ts";

export const EVENT_NAMES = [
  "received",
  "invalid",
  "conflict",
  "capacity_wait",
  "quota_wait",
  "capacity_acquired",
  "backend_retry",
  "backend_auth",
  "backend_refused",
  "backend_pending",
  "backend_ready",
  "claim_pending",
  "claim_timeout",
  "runner_claimed",
  "acked",
  "deferred",
  "published",
  "claimed",
  "completed",
  "teardown_failed",
  "already_done",
  "cancelled",
  "no_route",
  "recovered",
  "runner_deleted",
  "gitea_sweep_disabled",
  "gitea_version_unknown",
  "claim_held",
  "webhook_ignored",
  "runner_mismatch",
  "sweep_item_failed",
  "stale_delivery",
  "runner_registered",
  "gateway_fallback",
  "tombstoned",
  "queued_after_completed",
  "teardown_retried",
  "warm_filled",
  "warm_scaled_down",
  "warm_recycled",
  "warm_boot_stalled",
  "warm_hour_end",
  "backend_unneeded",
  "warm_reuse_filled",
  "warm_busy",
  "warm_took_job",
  "warm_converted",
  "taken_by_other",
  "turn_given",
  "turn_resumed",
  "slot_reclaimed",
  "warm_grace",
  "boot_timeout",
  "boot_gave_up",
  "lifetime_reached",
  "job_started_elsewhere",
  "warm_gone",
  "forgejo_poll_failed",
  "forgejo_poll_recovered",
  "handle_conflict",
  "unbindable_job",
  "poller_armed",
  "poller_retired",
  "warm_exited",
  "registered_at_scope",
  "moved_to_warm",
  "move_undone",
  "bootstrap_taken",
  "launch_not_fetched",
  "orphan_deleted",
  "backend_full",
  "interrupted_before_claim",
  "interrupted_after_claim",
  "rerun_asked",
  "rerun_by_hand",
  "rerun_refused",
  "rerun_settled",
  "cache_hit",
  "cache_miss",
  "cache_saved",
  "cache_refused",
  "cache_evicted",
] as const;
export type EventName = (typeof EVENT_NAMES)[number];

export interface DispatchEvent {
  event: EventName;
  assignment: string;
  backend: Backend | undefined;
  /** The runner pool (RUNNER_POOLS), where it matters. */
  pool?: string;
  retryDelayMs?: number;
  reason?: string;
  /** The Actions cache's events: the job's repository, and the bytes saved. */
  repository?: string;
  bytes?: number;
}

export interface BatchSummary {
  event: "reconcile_summary";
  backend: Backend;
  trigger: string;
  fetched: number;
  acked: number;
  naked: number;
  termed: number;
  deferred: number;
  /** Messages that came back within the pass and were handed back unprocessed. */
  revisited: number;
  errors: number;
  durationMs: number;
}

/** Where events and summaries go; console by default, a spy in tests. */
export interface EventSink {
  event(e: DispatchEvent): void;
  summary(s: BatchSummary): void;
  error(message: string, fields?: Record<string, string | number | undefined>): void;
}

export const consoleSink: EventSink = {
  event: (e) => console.log(JSON.stringify(e)),
  summary: (s) => console.log(JSON.stringify(s)),
  error: (message, fields) => console.error(JSON.stringify({ event: "error", message, ...fields })),
};
