import { hexHmacSha256, signatureMatches } from "../signature.ts";

/** Lowercase hex HMAC-SHA256 of `body` under `secret`: what Gitea sends as X-Gitea-Signature. */
export const giteaSignature = hexHmacSha256;

/** Checks X-Gitea-Signature (or X-Hub-Signature-256) against the raw bytes, in constant time. */
export function verifyGiteaSignature(headers: Headers, body: Uint8Array, secret: string | readonly string[]): Promise<boolean> {
  return signatureMatches(headers.get("x-gitea-signature") || headers.get("x-hub-signature-256")?.replace(/^sha256=/, ""), body, secret);
}
