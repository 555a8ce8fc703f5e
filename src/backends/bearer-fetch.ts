// One bearer-authenticated JSON call of a driver's API (Kubernetes, Hetzner) over fetch: a network
// failure or a timeout becomes a BackendError naming the call, never its URL or token.
import { BackendError } from "../domain/backend.ts";

export async function bearerFetch(
  doFetch: typeof fetch,
  call: { url: string; token: string; method: string; path: string; what: string; body?: unknown },
  signal: AbortSignal,
): Promise<Response> {
  try {
    return await doFetch(`${call.url}${call.path}`, {
      method: call.method,
      signal,
      headers: { authorization: `Bearer ${call.token}`, accept: "application/json", ...(call.body ? { "content-type": "application/json" } : {}) },
      ...(call.body ? { body: JSON.stringify(call.body) } : {}),
    });
  } catch (err) {
    const name = (err as Error)?.name;
    throw new BackendError(`${call.method} ${call.what} ${name === "TimeoutError" || name === "AbortError" ? "timed out" : "failed"}`);
  }
}

/** `value`, once the answer's body is let go (a body never read holds its connection). */
export async function drain<T>(res: Response, value: T): Promise<T> {
  await res.body?.cancel();
  return value;
}
