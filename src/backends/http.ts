// The generic `http` driver: PUT/DELETE <url>/runners/<id> with a bearer token.
import { z } from "zod";
import { BackendError, type RunnerBackend } from "../domain/backend.ts";
import type { DriverModule } from "./driver-module.ts";

const statusBody = z.object({ status: z.enum(["ready", "pending"]) });

export interface HttpBackendOptions {
  url: string;
  token: string | undefined;
  fetch?: typeof fetch;
}

export function createHttpBackend(opts: HttpBackendOptions): RunnerBackend {
  const doFetch = opts.fetch ?? ((input, init) => fetch(input, init));
  const headers = (json: boolean): Record<string, string> => ({
    ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
    ...(json ? { "content-type": "application/json" } : {}),
    accept: "application/json",
  });
  const runnerUrl = (id: string) => `${opts.url}/runners/${encodeURIComponent(id)}`;
  const call = async (what: string, url: string, init: RequestInit): Promise<Response> => {
    try {
      return await doFetch(url, init);
    } catch (err) {
      const reason = (err as Error)?.name === "TimeoutError" || (err as Error)?.name === "AbortError" ? "timed out" : "failed";
      throw new BackendError(`${what} ${reason}`);
    }
  };
  return {
    async accept(request, signal) {
      const res = await call("PUT runner", runnerUrl(request.assignment.id), {
        method: "PUT",
        headers: headers(true),
        // The launch is for the drivers that start the runner themselves: the service gets the identity as documented.
        body: JSON.stringify({ ...request, launch: undefined }),
        signal,
      });
      if (![200, 201, 202].includes(res.status)) {
        await res.body?.cancel();
        throw new BackendError(`PUT runner answered ${res.status}`, res.status);
      }
      const parsed = statusBody.safeParse(await res.json().catch(() => undefined));
      if (!parsed.success) throw new BackendError(`PUT runner answered ${res.status} with an invalid body`, res.status);
      const expected = res.status === 202 ? "pending" : "ready";
      if (parsed.data.status !== expected) throw new BackendError(`PUT runner answered ${res.status} with status ${parsed.data.status}`, res.status);
      return parsed.data.status;
    },
    async teardown(id, signal) {
      const res = await call("DELETE runner", runnerUrl(id), { method: "DELETE", headers: headers(false), signal });
      await res.body?.cancel();
      if (![200, 204, 404].includes(res.status)) throw new BackendError(`DELETE runner answered ${res.status}`, res.status);
    },
  };
}

/** The http driver as the dispatcher knows it: each backend's own URL and token, nothing shared. */
export const httpDriver: DriverModule<true> = {
  needsForge: false,
  settingsKey: "http",
  load(_env, using, problems) {
    for (const b of using)
      if (!b.url)
        problems.push(
          b.named === undefined
            ? `${b.backend.toUpperCase()}_BACKEND_URL is required while CAPACITY_${b.backend.toUpperCase()} > 0 and ${b.backend.toUpperCase()}_DRIVER=http (set CAPACITY_${b.backend.toUpperCase()}=0 to disable the ${b.backend} backend)`
            : `BACKENDS[${b.named}]["url"] is required with the http driver (backend ${b.backend})`,
        );
    return true;
  },
  create: (b, _settings, deps) => createHttpBackend({ url: b.url!, token: b.token, ...(deps.fetch ? { fetch: deps.fetch } : {}) }),
};
