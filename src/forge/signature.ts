// Webhook signatures as Gitea and Forgejo make them: lowercase hex HMAC-SHA256 of the raw body
// with the webhook's secret, compared in constant time.
import { timingSafeEqual } from "../model/crypto.ts";

export async function hexHmacSha256(secret: string, body: Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, body));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** `given` (a header's value; absent: false) is the signature of `body` under `secret`. */
export async function signatureMatches(given: string | null | undefined, body: Uint8Array, secret: string): Promise<boolean> {
  if (!given) return false;
  return timingSafeEqual(given.trim().toLowerCase(), await hexHmacSha256(secret, body));
}
