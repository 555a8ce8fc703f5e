// The few Kubernetes REST verbs the drivers need, over fetch, bearer-authenticated. Status codes
// map onto the driver contract: 404 is "absent", 409 AlreadyExists is "already created".
import { BackendError } from "../../domain/backend.ts";
import { bearerFetch, drain } from "../bearer-fetch.ts";

export interface KubeApiOptions {
  url: string;
  token: string;
  fetch?: typeof fetch;
}

export interface KubeObject {
  metadata?: { name?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  status?: { phase?: string };
  [key: string]: unknown;
}

export interface KubeApi {
  /** POST; false when it already existed (409 AlreadyExists). */
  create(collection: string, body: KubeObject, signal: AbortSignal): Promise<boolean>;
  /** PUT of a whole object (used to refresh a Secret that already existed). */
  replace(path: string, body: KubeObject, signal: AbortSignal): Promise<void>;
  get(path: string, signal: AbortSignal): Promise<KubeObject | null>;
  /** DELETE; a missing object is fine. */
  remove(path: string, signal: AbortSignal): Promise<void>;
}

export function createKubeApi(opts: KubeApiOptions): KubeApi {
  const doFetch = opts.fetch ?? ((i, init) => fetch(i, init));
  const call = (method: string, path: string, signal: AbortSignal, body?: KubeObject): Promise<Response> =>
    bearerFetch(doFetch, { url: opts.url, token: opts.token, method, path, what: kindOf(path), body }, signal);
  const refuse = async (method: string, path: string, res: Response): Promise<never> => {
    const status = (await res.json().catch(() => ({}))) as { reason?: string };
    throw new BackendError(`${method} ${kindOf(path)} answered ${res.status}${status.reason ? ` ${status.reason}` : ""}`, res.status);
  };
  return {
    async create(collection, body, signal) {
      const res = await call("POST", collection, signal, body);
      if (res.status === 201 || res.status === 200 || res.status === 202) return drain(res, true);
      if (res.status === 409) {
        const status = (await res.json().catch(() => ({}))) as { reason?: string };
        if (status.reason === "AlreadyExists") return false;
        throw new BackendError(`POST ${kindOf(collection)} answered 409 ${status.reason ?? ""}`.trim(), 409);
      }
      return refuse("POST", collection, res);
    },
    async replace(path, body, signal) {
      const res = await call("PUT", path, signal, body);
      if (res.ok) return drain(res, undefined);
      return refuse("PUT", path, res);
    },
    async get(path, signal) {
      const res = await call("GET", path, signal);
      if (res.status === 404) return drain(res, null);
      if (!res.ok) return refuse("GET", path, res);
      return res.json<KubeObject>();
    },
    async remove(path, signal) {
      const res = await call("DELETE", path, signal);
      if (res.ok || res.status === 404) return drain(res, undefined);
      return refuse("DELETE", path, res);
    },
  };
}

/** "pods" out of ".../namespaces/ns/pods/name": errors name the kind, never an object's content. */
function kindOf(path: string): string {
  const parts = path.split("?")[0]!.split("/");
  const ns = parts.indexOf("namespaces");
  return ns >= 0 ? (parts[ns + 2] ?? "object") : "object";
}
