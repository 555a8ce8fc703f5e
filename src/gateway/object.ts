// The NATS gateway: a Durable Object that keeps one warm NATS connection per NATS_URL and
// credentials, and runs each request path call on it (a publish and its record, a claim, a
// completion, an eager pass). A Durable Object, unlike an invocation, may keep an outbound
// WebSocket across requests; an invocation that calls it pays one RPC instead of a connection.
import { DurableObject } from "cloudflare:workers";
import type { Config } from "../app/config.ts";
import { sha256Key } from "../model/crypto.ts";
import { createDispatcher, type ReconcileOptions } from "../app/dispatcher.ts";
import { REQUEST_TIMEOUT_MS } from "../nats/connection.ts";
import { directPath, type RequestPath } from "../app/request-path.ts";
import { consoleSink } from "../model/events.ts";
import type { WebhookOutcome } from "../forge/gitea/webhook.ts";
import { recordAssignment, type Published } from "../domain/publish.ts";
import { createCoalescer } from "./coalesce.ts";
import { observeStartups, type Started } from "../pools/taken.ts";
import { createKeeper, type ConnectionKeeper } from "./keeper.ts";
import type { TokenCache } from "../forge/gitea/client.ts";
import { collectingSink, reasonOf, toWire, type GatewayAnswer, type GatewayCall, type LogLine } from "./protocol.ts";

/** A request path call (not a pass) is answered within this, or answered Unavailable. */
export const CALL_DEADLINE_MS = 2_000;
/**
 * Bound on a Gitea call inside a request path call (a webhook's stale-replay check), leaving the
 * rest of CALL_DEADLINE_MS for NATS: a slow Gitea then answers a 503 that names Gitea, before
 * anything was published, rather than one blaming NATS while the work goes on.
 */
export const GITEA_CALL_MS = 1_200;
/** Eager passes after publishes and webhooks in flight at once per backend (see coalesce.ts). */
export const EAGER_PASSES_AT_ONCE = 4;
/**
 * Start-up times are written this long after the first of a batch: under load, one write per pool
 * instead of one per job on the same key (each a compare-and-set that the others make retry). An
 * object that goes away meanwhile loses the batch's observations (a metric, not a job).
 */
export const STARTUP_BATCH_MS = 250;
/** A connection nobody used for this long is closed (a NATS_URL or credentials no longer in use). */
const IDLE_CLOSE_MS = 10 * 60_000;

export class NatsGateway extends DurableObject {
  readonly #keepers = new Map<string, ConnectionKeeper>();
  readonly #passes = createCoalescer<GatewayAnswer>(EAGER_PASSES_AT_ONCE);
  /** Job start-ups waiting for their batch's write, per connection and stream (see #afterAnswer). */
  readonly #startups = new WeakMap<ConnectionKeeper, Map<string, Started[]>>();
  /** Registration tokens kept across passes, per Gitea and API token (see TokenCache). */
  readonly #giteaTokens = new Map<string, TokenCache>();

  /**
   * Runs one request path call on the warm connection of `config`'s NATS settings. The config
   * comes with every call, so that the object always serves the calling Worker's version of it.
   */
  async call(config: Config, call: GatewayCall): Promise<GatewayAnswer> {
    const { key, keeper } = await this.#keeperFor(config);
    if (call.op === "reconcile") return this.#eagerPass(config, key, keeper, ...call.args);
    const answer = await this.#run(config, keeper, call);
    return answer.ok && (call.op === "publish" || call.op === "webhook") ? this.#afterAnswer(config, keeper, answer) : answer;
  }

  /**
   * Eager passes, coalesced per backend and kind (see coalesce.ts). One after a publish or webhook
   * takes whatever is new, and the rounds after the first take everything that came meanwhile, as
   * a cron pass does (an eager pass stops at its first batch with a new assignment). One after a
   * release (or a claim whose own ack failed) waits for messages coming back from their nak delay, and so does each
   * round after it, with a window of its own: a thousand runners claiming at once made a thousand
   * passes, each holding a pull open in this one object.
   */
  async #eagerPass(config: Config, key: string, keeper: ConnectionKeeper, trigger: string, budgetMs: number, opts: ReconcileOptions): Promise<GatewayAnswer> {
    const until = Date.now() + budgetMs;
    const wait = opts.firstPullWaitMs ?? 0;
    const logs: LogLine[] = [];
    // Looked up only by a call that runs a pass: most calls in a burst are coalesced away.
    let tokens: TokenCache | undefined;
    const pass = async (round: number) => {
      const roundOpts = round === 0 || wait ? opts : { ...opts, eager: false };
      if (round === 0) tokens = await this.#tokensFor(config);
      const a = await this.#run(config, keeper, { op: "reconcile", args: [trigger, Math.max(until - Date.now(), wait ? wait + 500 : 0), roundOpts] }, tokens);
      logs.push(...a.logs);
      return a;
    };
    const answer = await this.#passes.run(`${key}:${String(opts.only ?? "all")}:${wait}`, pass, { until });
    return answer ? { ...answer, logs } : { ok: true, value: [], logs: [] };
  }

  /**
   * Writes what a publish or webhook left for after its answer (the record, a job's start-up
   * time) here, on the warm connection, rather than in one more call from the invocation. If the
   * object goes away first, the message's first delivery writes the record (as after any record
   * write that failed). The eager pass stays the invocation's to ask for: it runs within that
   * invocation's waitUntil.
   */
  #afterAnswer(config: Config, keeper: ConnectionKeeper, answer: GatewayAnswer & { ok: true }): GatewayAnswer {
    const { pending, record, started, facts, ...rest } = answer.value as Partial<Published & WebhookOutcome>;
    const assignment = pending ?? record;
    if (!assignment && !started) return answer;
    const after = (what: string, fn: (d: ReturnType<typeof createDispatcher>) => Promise<void>) => {
      const write = keeper.run((handle) => fn(createDispatcher({ config, sink: consoleSink, borrowed: handle })), {
        deadline: Date.now() + CALL_DEADLINE_MS,
        retry: true,
      });
      // Not ctx.waitUntil: in workerd it held the RPC's answer until the write was done (a hung
      // connection then held the answer past its deadline). The object outlives the promise anyway.
      void write.catch((err) => consoleSink.error(`${what} failed`, { reason: reasonOf(err) }));
    };
    if (assignment) after("record after publish", (d) => recordAssignment(d, assignment, facts));
    // A job's start-up time, here too: the invocation would open a connection for this one write.
    // Those of STARTUP_BATCH_MS go together: one write per pool, not a contended one per job.
    if (started) {
      const batches = this.#startups.get(keeper) ?? this.#startups.set(keeper, new Map()).get(keeper)!;
      const batch = batches.get(config.stream);
      if (batch) batch.push(started);
      else {
        const items = [started];
        batches.set(config.stream, items);
        setTimeout(() => {
          batches.delete(config.stream);
          after("job start-up times", (d) => observeStartups(d, items));
        }, STARTUP_BATCH_MS);
      }
    }
    return { ...answer, value: rest };
  }

  async #tokensFor(config: Config): Promise<TokenCache | undefined> {
    if (!config.gitea) return undefined;
    // Keyed by a hash: the map holds no credentials in its keys.
    const key = await sha256Key(JSON.stringify([config.gitea.url, config.gitea.scope, config.gitea.apiToken]));
    for (const [k, t] of this.#giteaTokens) if (k !== key && [...t.values()].every((kept) => kept.until < Date.now())) this.#giteaTokens.delete(k);
    let tokens = this.#giteaTokens.get(key);
    if (!tokens) this.#giteaTokens.set(key, (tokens = new Map() as TokenCache));
    return tokens;
  }

  async #run(config: Config, keeper: ConnectionKeeper, call: GatewayCall, giteaTokens?: TokenCache): Promise<GatewayAnswer> {
    const sink = collectingSink();
    const pass = call.op === "reconcile";
    // A pass keeps to its own budget (its reads are bounded); a request call answers within the deadline.
    const deadline = Date.now() + (pass ? call.args[1] + REQUEST_TIMEOUT_MS : CALL_DEADLINE_MS);
    try {
      const value = await keeper.run(
        (handle) => {
          const path = directPath(
            createDispatcher({ config, sink, borrowed: handle, ...(pass ? {} : { giteaTimeoutMs: GITEA_CALL_MS }), ...(giteaTokens ? { giteaTokens } : {}) }),
          );
          return (path[call.op] as (...args: unknown[]) => Promise<unknown>)(...call.args);
        },
        { deadline, retry: !pass },
      );
      return { ok: true, value, logs: sink.lines };
    } catch (err) {
      const error = toWire(err, call.op);
      if (error.kind === "Internal") sink.error("gateway call failed", { op: call.op, reason: reasonOf(err) });
      return { ok: false, error, logs: sink.lines };
    }
  }

  /** Connections this object opened, per NATS settings in use (for operators and tests). */
  connectionsOpened(): Promise<number> {
    return Promise.resolve([...this.#keepers.values()].reduce((n, k) => n + k.opened, 0));
  }

  async #keeperFor(config: Config): Promise<{ key: string; keeper: ConnectionKeeper }> {
    // Keyed by a hash: the map holds no credentials in its keys.
    const key = await sha256Key(JSON.stringify([config.natsServers, config.natsAuth]));
    for (const [k, keeper] of this.#keepers) {
      if (k !== key && Date.now() - keeper.lastUsed > IDLE_CLOSE_MS) {
        this.#keepers.delete(k);
        void keeper.close();
      }
    }
    let keeper = this.#keepers.get(key);
    if (!keeper) this.#keepers.set(key, (keeper = createKeeper(config, "gitea-edge-dispatcher-gateway")));
    return { key, keeper };
  }
}

export type { RequestPath };
