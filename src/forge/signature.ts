// Webhook signatures as Gitea and Forgejo make them: lowercase hex HMAC-SHA256 of the raw body
// with the webhook's secret, compared in constant time.
import { timingSafeEqual } from "../model/crypto.ts";

export async function hexHmacSha256(secret: string, body: Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, body));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * `given` (a header's value; absent: false) is the signature of `body` under `secret`, or under
 * any of them: the current webhook secret and, during a rotation, the previous one.
 */
export async function signatureMatches(given: string | null | undefined, body: Uint8Array, secret: string | readonly string[]): Promise<boolean> {
  if (!given) return false;
  const want = given.trim().toLowerCase();
  let ok = false;
  // Every secret is tried, so that the time taken does not say which one matched.
  for (const s of typeof secret === "string" ? [secret] : secret) ok = (await timingSafeEqual(want, await hexHmacSha256(s, body))) || ok;
  return ok;
}
