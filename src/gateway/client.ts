// The request path through the gateway: one RPC per request to one of NATS_GATEWAY_SHARDS objects.
// When the object itself cannot be reached, the invocation does the call on its own connection:
// every call is idempotent, so one that may have half-run in the object is safe to make again.
import type { Context, Passes } from "../domain/context.ts";
import { deadlineFor, REQUEST_TIMEOUT_MS } from "../nats/connection.ts";
import { directPath, type PathOp, type RequestPath } from "../app/request-path.ts";
import { CALL_DEADLINE_MS, type NatsGateway } from "./object.ts";
import { fromWire, reasonOf, replayLogs, type GatewayAnswer, type GatewayCall } from "./protocol.ts";
import { gatewayName, shardOf } from "./shards.ts";

export { gatewayName, shardOf };

/** The Durable Object namespace of the gateway (wrangler.jsonc, durable_objects.bindings). */
export const GATEWAY_BINDING = "NATS_GATEWAY_DO";

/** Beyond the object's own deadline: time for the RPC itself before the object counts as unreachable. */
const RPC_SLACK_MS = 1_000;

export function gatewayPath(ns: DurableObjectNamespace<NatsGateway>, d: Context & Passes): RequestPath {
  const direct = directPath(d);
  const { shards, location } = d.config.gateway;
  const stubFor = (key: string) => ns.get(ns.idFromName(gatewayName(shardOf(key, shards))), location ? { locationHint: location } : undefined);

  async function call<K extends PathOp>(op: K, key: string, args: Parameters<RequestPath[K]>): Promise<Awaited<ReturnType<RequestPath[K]>>> {
    // The object gives a pass its budget and one request's timeout beyond it (see NatsGateway.call).
    const budget = op === "reconcile" ? (args[1] as number) + REQUEST_TIMEOUT_MS : CALL_DEADLINE_MS;
    let answer: GatewayAnswer;
    try {
      // RPC types the answer as a stub of it; it is the plain object the object returned.
      const got: unknown = await deadlineFor(stubFor(key).call(d.config, { op, args } as GatewayCall), budget + RPC_SLACK_MS, "the gateway did not answer");
      answer = got as GatewayAnswer;
    } catch (err) {
      d.sink.event({ event: "gateway_fallback", assignment: key, backend: undefined, reason: reasonOf(err) });
      return (direct[op] as (...a: unknown[]) => Promise<Awaited<ReturnType<RequestPath[K]>>>)(...args);
    }
    replayLogs(answer.logs, d.sink);
    if (!answer.ok) throw fromWire(answer.error);
    return answer.value as Awaited<ReturnType<RequestPath[K]>>;
  }

  return {
    publish: (body) => call("publish", idOf(body), [body]),
    record: (assignment) => call("record", assignment.id, [assignment]),
    get: (id) => call("get", id, [id]),
    claim: (id, incarnation) => call("claim", id, [id, incarnation]),
    complete: (id, incarnation) => call("complete", id, [id, incarnation]),
    webhook: (payload) => call("webhook", `job-${payload.workflow_job.id}`, [payload]),
    reconcile: (trigger, budgetMs, opts) => call("reconcile", crypto.randomUUID(), [trigger, budgetMs, opts]),
  };
}

function idOf(body: unknown): string {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === "string" ? id.slice(0, 128) : crypto.randomUUID();
}
