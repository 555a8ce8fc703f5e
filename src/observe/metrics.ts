// The snapshot in Prometheus text exposition format (version 0.0.4). Labels carry backend, pool,
// state and owner names only (an owner is a Gitea user or organisation name): nothing secret.
import type { Snapshot } from "./snapshot.ts";
import type { CacheFigures } from "../cache/figures.ts";
import { emptyHistogram, STARTUP_BUCKETS, type Histogram } from "../state/startup-times.ts";
import { START_VIAS } from "../state/record.ts";

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Sample = [labels: Record<string, string>, value: number];

/** A Prometheus histogram per pool (and via), from the durable bucket counts (state/startup-times.ts). */
function histogram(lines: string[], name: string, help: string, series: [labels: string, h: Histogram][]): void {
  lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
  for (const [l, h] of series) {
    STARTUP_BUCKETS.forEach((le, i) => lines.push(`${name}_bucket{${l},le="${le}"} ${h.buckets[i] ?? 0}`));
    lines.push(`${name}_bucket{${l},le="+Inf"} ${h.count}`, `${name}_sum{${l}} ${h.sum}`, `${name}_count{${l}} ${h.count}`);
  }
}

/** Each pool's start-ups by via: "new" always (the family is there from the first scrape), the others once seen. */
function viaSeries(pools: Snapshot["pools"]): [string, Histogram][] {
  return pools.flatMap((p) =>
    START_VIAS.flatMap((via): [string, Histogram][] => {
      const h = p.startup?.via?.[via];
      return h || via === "new" ? [[`pool="${escapeLabel(p.pool)}",via="${via}"`, h ?? emptyHistogram()]] : [];
    }),
  );
}

export function formatMetrics(s: Snapshot): string {
  const lines: string[] = [];
  const metric = (name: string, type: "gauge" | "counter", help: string, samples: Sample[]) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) {
      const l = Object.entries(labels)
        .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
        .join(",");
      lines.push(`${name}${l ? `{${l}}` : ""} ${value}`);
    }
  };
  const per = (pick: (b: Snapshot["backends"][number]) => number): Sample[] => s.backends.map((b) => [{ backend: b.backend }, pick(b)]);
  metric(
    "gdr_capacity",
    "gauge",
    "Most runners of the backend at once (CAPACITY_*).",
    per((b) => b.capacity),
  );
  metric(
    "gdr_slots_in_use",
    "gauge",
    "Admission slots held: runners being provisioned, ready or running.",
    per((b) => b.slotsInUse),
  );
  metric(
    "gdr_registrations_in_progress",
    "gauge",
    "Runner registrations under way (reserved, no runner stored yet).",
    per((b) => b.registering),
  );
  metric(
    "gdr_consumer_pending_messages",
    "gauge",
    "Assignments queued in the stream, never delivered yet.",
    per((b) => b.queued),
  );
  metric(
    "gdr_consumer_ack_pending_messages",
    "gauge",
    "Assignments delivered and not yet acknowledged.",
    per((b) => b.ackPending),
  );
  metric(
    "gdr_consumer_redelivered_messages",
    "gauge",
    "Assignments out for redelivery at least once.",
    per((b) => b.redelivered),
  );
  metric("gdr_stream_messages", "gauge", "Assignment messages in the stream.", [[{}, s.stream.messages]]);
  const states: [string, (b: Snapshot["backends"][number]) => number][] = [
    ["received", (b) => b.queued],
    ["capacity_wait", (b) => b.waitingForCapacity],
    ["quota_wait", (b) => b.waitingForQuota],
    ["backend_pending", (b) => b.pendingAtBackend],
    ["backend_ready", (b) => b.readyForClaim],
    ["claimed", (b) => b.running],
  ];
  metric(
    "gdr_assignments",
    "gauge",
    "Live assignments per state (finished ones are not counted).",
    s.backends.flatMap((b) => states.map(([state, pick]): Sample => [{ backend: b.backend, state }, pick(b)])),
  );
  metric("gdr_stream_published_messages_total", "counter", "Assignment messages stored in the stream so far.", [[{}, s.stream.published]]);
  metric("gdr_stream_acked_messages_total", "counter", "Assignment messages acknowledged (or terminated) and removed so far.", [[{}, s.stream.acked]]);
  metric(
    "gdr_consumer_delivered_messages_total",
    "counter",
    "Deliveries so far, redeliveries included.",
    per((b) => b.delivered),
  );
  // Bounded: STATUS_TOP_OWNERS owners by name, the rest as owner="other".
  const owner = (pick: (o: Snapshot["owners"][number]) => number): Sample[] => s.owners.map((o) => [{ owner: o.owner }, pick(o)]);
  metric(
    "gdr_owner_runners",
    "gauge",
    "Slots held by the owner's jobs on every backend (the busiest owners; the rest as other).",
    owner((o) => o.runners),
  );
  metric(
    "gdr_owner_waiting_jobs",
    "gauge",
    "The owner's jobs waiting their turn in the wait set: for a free slot (capacity_wait) or under a QUOTAS limit (quota_wait).",
    s.owners.flatMap((o): Sample[] => [
      [{ owner: o.owner, state: "capacity_wait" }, o.waitingForCapacity],
      [{ owner: o.owner, state: "quota_wait" }, o.waitingForQuota],
    ]),
  );
  if (s.pools.length) {
    const pool = (pick: (p: Snapshot["pools"][number]) => number): Sample[] => s.pools.map((p) => [{ pool: p.pool }, pick(p)]);
    metric(
      "gdr_pool_runners",
      "gauge",
      "Runners of the pool: idle (up, waiting for a job), busy (running one), booting (asked for, not up yet).",
      s.pools.flatMap((p) => (["idle", "busy", "booting"] as const).map((state): Sample => [{ pool: p.pool, state }, p[state]])),
    );
    metric(
      "gdr_pool_warm_runners",
      "gauge",
      "Of the pool's idle and booting runners, those kept warm.",
      pool((p) => p.warm),
    );
    metric(
      "gdr_pool_warm_by_reuse_runners",
      "gauge",
      "Of the pool's warm runners, those rebuilt on a finished job's server within its paid hour (reuse: \"rebuild\").",
      pool((p) => p.warmByReuse ?? 0),
    );
    metric(
      "gdr_pool_warm_target",
      "gauge",
      "Warm runners the pool keeps now (minIdle, or its schedule window's).",
      pool((p) => p.target),
    );
    metric(
      "gdr_pool_max_runners",
      "gauge",
      "The pool's maxRunners (absent: only the backend's capacity caps it).",
      s.pools.flatMap((p): Sample[] => (p.maxRunners === null ? [] : [[{ pool: p.pool }, p.maxRunners]])),
    );
    metric(
      "gdr_pool_boot_give_ups_total",
      "counter",
      "Runners of the pool given up on: not up within bootTimeoutMs, 3 times over (boot_gave_up).",
      pool((p) => p.startup?.bootGiveUps ?? 0),
    );
    metric(
      "gdr_pool_launches_missed_total",
      "counter",
      "Cloud VMs of the pool that did not fetch their launch within 4 minutes of being asked for (launch_not_fetched): billed, and running no job.",
      pool((p) => p.startup?.launchesMissed ?? 0),
    );
    histogram(
      lines,
      "gdr_job_startup_duration_seconds",
      "Time from a job's queued to a runner of the pool taking it (in_progress).",
      s.pools.map((p) => [`pool="${escapeLabel(p.pool)}"`, p.startup ?? emptyHistogram()]),
    );
    histogram(
      lines,
      "gdr_job_startup_by_via_duration_seconds",
      "The same, by how the runner came: reuse (warm by reuse), rebuilt (a parked server rebuilt for the job), warm (a warm runner on a new machine), new.",
      viaSeries(s.pools),
    );
  }
  if (s.forgePoll) {
    metric(
      "gdr_forgejo_poll_failures_total",
      "counter",
      "Polls of Forgejo's waiting list that failed (no answer, or not Forgejo 15's); nothing is concluded from them.",
      [[{}, s.forgePoll.failuresTotal]],
    );
    metric("gdr_forgejo_poll_failing", "gauge", "1 while the last poll of Forgejo's waiting list failed.", [[{}, s.forgePoll.failing ? 1 : 0]]);
  }
  if (s.cloud.length) {
    const cloud = (pick: (c: Snapshot["cloud"][number]) => number | undefined): Sample[] =>
      s.cloud.flatMap((c): Sample[] => {
        const v = pick(c);
        return v === undefined ? [] : [[{ backend: c.backend }, v]];
      });
    metric(
      "gdr_backend_full",
      "gauge",
      "1 while the cloud project's server limit holds the backend's creates back (backend_full).",
      cloud((c) => (c.full ? 1 : 0)),
    );
    metric(
      "gdr_backend_full_total",
      "counter",
      "Creates the cloud project's server limit refused.",
      cloud((c) => c.fullTotal),
    );
    metric(
      "gdr_backend_swept_total",
      "counter",
      "Servers the backend's sweep deleted: orphans, ended assignments', past their lifetime.",
      cloud((c) => c.swept),
    );
    const paid = (pick: (p: NonNullable<Snapshot["cloud"][number]["paid"]>[number]) => Sample[]): Sample[] =>
      s.cloud.flatMap((c) => (c.paid ?? []).flatMap((p) => pick(p).map(([l, v]): Sample => [{ backend: c.backend, pool: p.pool, ...l }, v])));
    metric(
      "gdr_backend_paid_seconds_total",
      "counter",
      "Paid time of the backend's deleted servers (billed by the started hour): used (creation to delete) and given_up (the rest of the hour it was deleted in).",
      paid((p) => [
        [{ part: "used" }, p.used],
        [{ part: "given_up" }, p.givenUp],
      ]),
    );
    metric(
      "gdr_backend_servers_deleted_total",
      "counter",
      "Servers of the pool deleted (by a teardown, or the sweep), whose paid time gdr_backend_paid_seconds_total counts.",
      paid((p) => [[{}, p.servers]]),
    );
    metric(
      "gdr_backend_api_rate_remaining",
      "gauge",
      "Requests left of the cloud API's rate limit at the last sweep.",
      cloud((c) => c.rate?.remaining),
    );
    metric(
      "gdr_backend_api_rate_limit",
      "gauge",
      "The cloud API's rate limit (requests an hour), as it says.",
      cloud((c) => c.rate?.limit),
    );
  }
  if (s.interruptions && s.reruns) {
    const reruns = s.reruns;
    metric(
      "gdr_interruptions_total",
      "counter",
      "Runners whose machine its cloud took back (a Spot interruption), per pool, before their claim (replaced) and after it (job lost).",
      s.interruptions.flatMap((i): Sample[] => [
        [{ pool: i.pool, when: "before_claim" }, i.before],
        [{ pool: i.pool, when: "after_claim" }, i.after],
      ]),
    );
    metric(
      "gdr_reruns",
      "gauge",
      "Jobs lost with an interrupted runner, by their rerun: waiting for the run to finish, asked, by_hand (the forge cannot: rerun it by hand), refused, or settled (the job or its run was cancelled: no rerun).",
      (["waiting", "asked", "by_hand", "refused", "settled"] as const).map((state): Sample => [{ state }, reruns.states[state]]),
    );
  }
  if (s.cache) {
    const rows = s.cache;
    const each = (pick: (f: CacheFigures) => number): Sample[] => rows.map((r) => [{ repository: r.repository }, pick(r.figures)]);
    metric(
      "gdr_cache_hits_total",
      "counter",
      "Actions cache restores that found an entry, per repository.",
      each((f) => f.hits),
    );
    metric(
      "gdr_cache_misses_total",
      "counter",
      "Actions cache restores that found none.",
      each((f) => f.misses),
    );
    metric(
      "gdr_cache_bytes_in_total",
      "counter",
      "Bytes of the cache entries committed.",
      each((f) => f.bytesIn),
    );
    metric(
      "gdr_cache_bytes_out_total",
      "counter",
      "Bytes of the cache downloads answered.",
      each((f) => f.bytesOut),
    );
    metric(
      "gdr_cache_evictions_total",
      "counter",
      "Cache entries removed over the repository's CACHE_REPO_BYTES (least recently used first).",
      each((f) => f.evictions),
    );
    metric(
      "gdr_cache_entries",
      "gauge",
      "Committed cache entries, as the cron tick's upkeep last counted them.",
      each((f) => f.entries),
    );
    metric(
      "gdr_cache_bytes_stored",
      "gauge",
      "Bytes of the committed cache entries, as the upkeep last counted them.",
      each((f) => f.bytesStored),
    );
    metric(
      "gdr_cache_refusals_total",
      "counter",
      "Cache requests refused, by reason: input, size, taken (a key saved or being saved), not-reserved, scope, committed, chunk, commit, storage.",
      rows.flatMap((r) => Object.entries(r.figures.refused).map(([reason, n]): Sample => [{ repository: r.repository, reason }, n ?? 0])),
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Every label value, as the format requires (Gitea and pool names hold no quote or backslash, but a label must never break a line). */
function escapeLabel(v: string): string {
  return v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}
