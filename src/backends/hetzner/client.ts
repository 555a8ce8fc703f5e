// The few Hetzner Cloud API calls the hetzner driver needs, over fetch with HCLOUD_TOKEN. Answers
// map onto the driver contract: 404 is "absent"; 409 uniqueness_error is "already created";
// resource_unavailable and placement_error are "no room here" (try the next candidate);
// resource_limit_exceeded is "the project is full" (wait, as at CAPACITY). Every answer's
// RateLimit-* headers update the budget, and a call the budget does not allow is not made.
import { BackendError, BackendRefused } from "../../domain/backend.ts";
import { bearerFetch, drain } from "../bearer-fetch.ts";
import { localGate, RateBudgetExhausted, readRateHeaders, type CallKind, type RateGate, type RateState } from "./rate-budget.ts";

export { RateBudgetExhausted };

export interface HetznerOptions {
  /** HCLOUD_API_URL, without a trailing slash. */
  url: string;
  token: string;
  fetch?: typeof fetch;
  now?: () => number;
  /** Where the budget is kept between calls: the shared record (shared-budget.ts), else this holder (one invocation's). */
  gate?: RateGate;
  budget?: { state: RateState | undefined };
}

/** The server fields the driver reads. */
export interface HetznerServer {
  id: number;
  name: string;
  status: string;
  created: string;
  labels: Record<string, string>;
}

/** A refusal the driver acts on by its code (`uniqueness_error`, `resource_unavailable`, …). */
export class HetznerError extends BackendError {
  readonly code: string;
  /** invalid_input: the body's fields Hetzner named (`details.fields[].name`), with what it said of each. */
  readonly fields: { name: string; messages: string[] }[];
  constructor(message: string, status: number, code: string, fields: { name: string; messages: string[] }[] = []) {
    super(message, status);
    this.code = code;
    this.fields = fields;
  }
}

/** Hetzner's refusals of the token itself (its API reference, "Error Codes"); 403 resource_limit_exceeded and maintenance are not. */
const TOKEN_REFUSED = new Set(["unauthorized", "token_readonly", "forbidden"]);

export interface HetznerApi {
  /** The rate budget its calls spend. */
  gate: RateGate;
  /** POST /servers: the server, or a HetznerError with the API's code. */
  create(body: Record<string, unknown>, signal: AbortSignal): Promise<HetznerServer>;
  /** GET /servers?name=: the server of that name, or null. */
  byName(name: string, signal: AbortSignal, kind?: CallKind): Promise<HetznerServer | null>;
  get(id: number, signal: AbortSignal): Promise<HetznerServer | null>;
  /** POST /servers/{id}/actions/rebuild: true once asked; false when the server is gone. */
  rebuild(id: number, body: { image: string; user_data: string }, signal: AbortSignal): Promise<boolean>;
  /** DELETE; a server already gone is fine. */
  remove(id: number, signal: AbortSignal): Promise<void>;
  /**
   * Every server matching `selector`, every page; throws when any page fails, so that a list read
   * only in part is never taken for the whole (the orphan sweep tears down what it does not see).
   */
  listAll(selector: string, signal: AbortSignal, kind?: CallKind): Promise<HetznerServer[]>;
  /** GET /server_types, /locations or /images with `query`, every page (offer.ts reads what the project may create with). */
  list(resource: "server_types" | "locations" | "images", query: string, signal: AbortSignal): Promise<unknown[]>;
}

export function createHetznerApi(opts: HetznerOptions): HetznerApi {
  const doFetch = opts.fetch ?? ((i, init) => fetch(i, init));
  const now = opts.now ?? Date.now;
  const gate = opts.gate ?? localGate(opts.budget ?? { state: undefined }, now);
  const call = async (kind: CallKind, method: string, path: string, signal: AbortSignal, body?: unknown): Promise<Response> => {
    // Taken before it is sent: calls made meanwhile, here or by other invocations, see it spent.
    await gate.take(kind);
    const res = await bearerFetch(doFetch, { url: opts.url, token: opts.token, method, path, what: what(path), body }, signal);
    const seen = readRateHeaders(res.headers, now(), res.status);
    if (seen) await gate.seen(seen);
    return res;
  };
  const refuse = async (method: string, path: string, res: Response): Promise<never> => {
    const body = (await res.json().catch(() => ({}))) as { error?: { code?: string; details?: { fields?: { name?: unknown; messages?: unknown }[] } } };
    const code = body.error?.code ?? "unknown";
    if (res.status === 429) throw new RateBudgetExhausted(gate.state()?.blockedUntil ?? now() + 1000);
    if ((res.status === 401 || res.status === 403) && TOKEN_REFUSED.has(code))
      throw new BackendRefused(
        `Hetzner refused HCLOUD_TOKEN (${res.status} ${code}): a read & write API token of the servers' project`,
        "HCLOUD_TOKEN",
        "credentials",
        res.status,
      );
    const fields = (Array.isArray(body.error?.details?.fields) ? body.error.details.fields : []).flatMap((f) =>
      typeof f?.name === "string" ? [{ name: f.name, messages: Array.isArray(f.messages) ? f.messages.map(String) : [] }] : [],
    );
    throw new HetznerError(`${method} ${what(path)} answered ${res.status} ${code}`, res.status, code, fields);
  };
  /** Every page of a list, in order; throws when any page fails, or when the pages do not follow one another. */
  const pages = async <T>(resource: string, query: string, signal: AbortSignal, kind: CallKind): Promise<T[]> => {
    const out: T[] = [];
    for (let page = 1; ; page++) {
      const path = `/${resource}?${query ? `${query}&` : ""}per_page=50&page=${page}`;
      const res = await call(kind, "GET", path, signal);
      if (!res.ok) return refuse("GET", `/${resource}`, res);
      const body = await res.json<Record<string, unknown> & { meta?: { pagination?: { next_page?: number | null } } }>();
      const items = body[resource];
      if (!Array.isArray(items)) throw new BackendError(`GET /${resource} answered no ${resource}`);
      out.push(...(items as T[]));
      const next = body.meta?.pagination?.next_page;
      if (next === null || next === undefined) return out;
      if (next !== page + 1) throw new BackendError(`GET /${resource} paged to ${next} after ${page}: the list is not read`);
    }
  };
  return {
    gate,
    async create(body, signal) {
      const res = await call("create", "POST", "/servers", signal, body);
      if (res.status === 201) return (await res.json<{ server: HetznerServer }>()).server;
      return refuse("POST", "/servers", res);
    },
    async byName(name, signal, kind = "read") {
      const path = `/servers?name=${encodeURIComponent(name)}`;
      const res = await call(kind, "GET", path, signal);
      if (!res.ok) return refuse("GET", path, res);
      return (await res.json<{ servers: HetznerServer[] }>()).servers.find((s) => s.name === name) ?? null;
    },
    async get(id, signal) {
      const res = await call("read", "GET", `/servers/${id}`, signal);
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return refuse("GET", "/servers/{id}", res);
      return (await res.json<{ server: HetznerServer }>()).server;
    },
    async rebuild(id, body, signal) {
      const res = await call("create", "POST", `/servers/${id}/actions/rebuild`, signal, body);
      if (res.status === 201 || res.status === 200) return drain(res, true);
      if (res.status === 404) return drain(res, false);
      return refuse("POST", "/servers/{id}/actions/rebuild", res);
    },
    async remove(id, signal) {
      const res = await call("delete", "DELETE", `/servers/${id}`, signal);
      if (res.ok || res.status === 404) return drain(res, undefined);
      return refuse("DELETE", "/servers/{id}", res);
    },
    listAll: (selector, signal, kind = "read") => pages<HetznerServer>("servers", `label_selector=${encodeURIComponent(selector)}`, signal, kind),
    list: (resource, query, signal) => pages(resource, query, signal, "read"),
  };
}

const what = (path: string) => path.split("?")[0] ?? path;
