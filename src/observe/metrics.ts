// The snapshot in Prometheus text exposition format (version 0.0.4). Labels carry backend and
// state names only: nothing secret, nothing from a payload.
import type { Snapshot } from "./snapshot.ts";

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Sample = [labels: Record<string, string>, value: number];

export function formatMetrics(s: Snapshot): string {
  const lines: string[] = [];
  const metric = (name: string, type: "gauge" | "counter", help: string, samples: Sample[]) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) {
      const l = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(",");
      lines.push(`${name}${l ? `{${l}}` : ""} ${value}`);
    }
  };
  const per = (pick: (b: Snapshot["backends"][number]) => number): Sample[] => s.backends.map((b) => [{ backend: b.backend }, pick(b)]);
  metric("gdr_capacity", "gauge", "Most runners of the backend at once (CAPACITY_*).", per((b) => b.capacity));
  metric("gdr_slots_in_use", "gauge", "Admission slots held: runners being provisioned, ready or running.", per((b) => b.slotsInUse));
  metric("gdr_registrations_in_progress", "gauge", "Gitea runner registrations under way (reservations held).", per((b) => b.registering));
  metric("gdr_consumer_pending_messages", "gauge", "Assignments queued in the stream, never delivered yet.", per((b) => b.queued));
  metric("gdr_consumer_ack_pending_messages", "gauge", "Assignments delivered and not yet acknowledged.", per((b) => b.ackPending));
  metric("gdr_consumer_redelivered_messages", "gauge", "Assignments out for redelivery at least once.", per((b) => b.redelivered));
  metric("gdr_stream_messages", "gauge", "Assignment messages in the stream.", [[{}, s.stream.messages]]);
  const states: [string, (b: Snapshot["backends"][number]) => number][] = [
    ["received", (b) => b.queued],
    ["capacity_wait", (b) => b.waitingForCapacity],
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
  metric("gdr_consumer_delivered_messages_total", "counter", "Deliveries so far, redeliveries included.", per((b) => b.delivered));
  return `${lines.join("\n")}\n`;
}
