// Carries out one reconciliation step for one delivery: gathers the facts `decide` asks for,
// then applies its verdict. Never waits for anything longer than one backend call.
import { decodeAssignment, type Assignment } from "../assignment.ts";
import { BackendError, type RunnerBackend, type RunnerRequest } from "../backends/types.ts";
import type { EventSink } from "../events.ts";
import type { Backend } from "../names.ts";
import type { DeliveredMessage } from "../nats/pull.ts";
import type { Admission } from "../state/admission.ts";
import type { AssignmentRecord, RecordStore } from "../state/records.ts";
import { decide, type Effect, type Facts, type Policy, type Verdict } from "./decide.ts";

export interface ProcessDeps {
  backend: Backend;
  trustDomain: string;
  policy: Policy;
  records: RecordStore;
  admission: Admission;
  runners: RunnerBackend;
  /**
   * Builds what the backend receives for an assignment (claim token, URLs, runner identity);
   * "busy" while another invocation registers its runner.
   */
  runnerRequest(assignment: Assignment): Promise<RunnerRequest | "busy">;
  /** Runs a backend call within the invocation's connection limit and timeout. */
  callBackend<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
  sink: EventSink;
  now(): number;
}

export async function processMessage(deps: ProcessDeps, msg: DeliveredMessage, budgetSpent: boolean): Promise<Verdict> {
  const facts: Facts = { now: deps.now(), budgetSpent };
  let assignment: Assignment | undefined;
  let record: AssignmentRecord | null = null;
  const id = () => assignment?.id ?? `seq-${msg.seq}`;
  for (;;) {
    const step = decide(facts, deps.policy);
    switch (step.next) {
      case "decode": {
        const decoded = decodeAssignment(msg.data, deps.trustDomain);
        facts.decoded = decoded.ok && decoded.assignment.backend === deps.backend;
        if (decoded.ok) assignment = decoded.assignment;
        if (facts.decoded) emit(deps, "received", id());
        break;
      }
      case "offer": {
        const offered = await deps.records.offer(assignment!);
        facts.offer = offered.result;
        record = offered.record;
        facts.state = record.state;
        facts.reason = record.reason;
        facts.readyAt = record.readyAt ? Date.parse(record.readyAt) : undefined;
        break;
      }
      case "admit":
        facts.admitted = await deps.admission.acquire(deps.backend, assignment!.id);
        if (facts.admitted) emit(deps, "capacity_acquired", id());
        break;
      case "call_backend": {
        try {
          const request = await deps.runnerRequest(assignment!);
          facts.backend = request === "busy" ? "pending" : await deps.callBackend((signal) => deps.runners.accept(request, signal));
        } catch (err) {
          const status = err instanceof BackendError ? err.status : undefined;
          facts.backend = status === 401 || status === 403 ? "auth_error" : "error";
          deps.sink.error("backend accept failed", { assignment: id(), backend: deps.backend, reason: (err as Error).message });
        }
        break;
      }
      case "done":
        await applyEffects(deps, assignment, step.effects);
        for (const event of step.events) emit(deps, event, id(), step);
        await act(msg, step);
        return step;
    }
  }
}

function emit(deps: ProcessDeps, event: Verdict["events"][number], assignment: string, step?: Verdict) {
  const action = step?.action;
  deps.sink.event({
    event,
    assignment,
    backend: deps.backend,
    ...(action?.kind === "nak" && event !== "runner_claimed" ? { retryDelayMs: action.delayMs } : {}),
    ...(action?.kind === "term" ? { reason: action.reason } : {}),
  });
}

async function act(msg: DeliveredMessage, v: Verdict): Promise<void> {
  if (v.action.kind === "ack") await msg.ackAck();
  else if (v.action.kind === "nak") msg.nak(v.action.delayMs);
  else msg.term(v.action.reason);
}

const settled = new Set(["claimed", "completed", "terminated"]);

async function applyEffects(deps: ProcessDeps, assignment: Assignment | undefined, effects: Effect[]): Promise<void> {
  if (!assignment) return;
  const at = () => new Date(deps.now()).toISOString();
  // Transitions never overwrite a claim that arrived meanwhile.
  const move = (change: (r: AssignmentRecord) => AssignmentRecord | undefined) =>
    deps.records.update(assignment.id, (r) => (settled.has(r.state) ? undefined : change(r)));
  for (const effect of effects) {
    switch (effect) {
      case "mark_waiting":
        await move((r) => (r.state === "capacity_wait" ? undefined : { ...r, state: "capacity_wait" }));
        break;
      case "mark_pending":
        await move((r) => (r.state === "backend_pending" ? undefined : { ...r, state: "backend_pending" }));
        break;
      case "mark_ready":
        await move((r) => ({ ...r, state: "backend_ready", readyAt: r.readyAt ?? at() }));
        break;
      case "release_slot":
        await deps.admission.release(deps.backend, assignment.id);
        break;
      case "forget_ready_and_teardown": {
        const after = await move((r) => {
          const { readyAt: _forgotten, ...rest } = r;
          return { ...rest, state: "backend_pending" };
        });
        // Only tear down when the claim did not win the race: a claimed runner is left alone.
        if (after && after.state === "backend_pending" && !after.readyAt) {
          await deps.callBackend((signal) => deps.runners.teardown(assignment.id, signal)).catch((err) => {
            deps.sink.event({ event: "teardown_failed", assignment: assignment.id, backend: deps.backend, reason: (err as Error).message });
          });
        }
        break;
      }
    }
  }
}
