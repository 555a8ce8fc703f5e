import { timingSafeEqual } from "../../crypto.ts";

/** Lowercase hex HMAC-SHA256 of `body` under `secret`: what Gitea sends as X-Gitea-Signature. */
export async function giteaSignature(secret: string, body: Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, body));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Checks X-Gitea-Signature (or X-Hub-Signature-256) against the raw bytes, in constant time. */
export async function verifyGiteaSignature(headers: Headers, body: Uint8Array, secret: string): Promise<boolean> {
  const given = headers.get("x-gitea-signature") || headers.get("x-hub-signature-256")?.replace(/^sha256=/, "");
  if (!given) return false;
  return timingSafeEqual(given.trim().toLowerCase(), await giteaSignature(secret, body));
}
