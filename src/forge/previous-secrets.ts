// The forge secrets kept while a rotation is under way (docs/deploy.md, "Rotating secrets"): still
// accepted (a webhook's signature) or still opened (a runner's sealed identity), never used to sign or seal.
import { decodeKey } from "../model/crypto.ts";

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v : undefined);

/** GITEA_WEBHOOK_SECRET_PREVIOUS and RUNNER_IDENTITY_KEY_PREVIOUS, when set; a malformed key is a problem. */
export function parsePreviousSecrets(raw: Record<string, unknown>, problems: string[]): { previousIdentityKey?: Uint8Array; previousWebhookSecret?: string } {
  const text = str(raw.RUNNER_IDENTITY_KEY_PREVIOUS);
  const previousIdentityKey = text ? decodeKey(text) : undefined;
  if (text && !previousIdentityKey) problems.push("RUNNER_IDENTITY_KEY_PREVIOUS must be the base64 of 32 random bytes (the key before RUNNER_IDENTITY_KEY)");
  const previousWebhookSecret = str(raw.GITEA_WEBHOOK_SECRET_PREVIOUS);
  return { ...(previousIdentityKey ? { previousIdentityKey } : {}), ...(previousWebhookSecret ? { previousWebhookSecret } : {}) };
}
