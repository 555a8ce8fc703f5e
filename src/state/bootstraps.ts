// One-time bootstraps: what a VM fetches at its first boot (its runner identity and claim token),
// sealed at rest and handed out once. The VM's user_data carries only a token; the entry is kept
// in the records bucket under the SHA-256 of that token, and taking it spends it at the revision
// read (its sealed payload emptied, the entry kept), so a second fetch, or a racing one, finds
// nothing. user_data may outlive the boot (a rebuild keeps it unless given another); the token in
// it is spent by then.
import type { KV } from "@nats-io/kv";
import { base64url, openJson, sealJson, sha256Key } from "../model/crypto.ts";
import { bootstrapKey } from "../nats/names.ts";
import { isWrongLastSequence, readJson } from "./kv.ts";

interface Entry {
  id: string;
  /** Empty once spent: taken, revoked or found expired (the entry stays, so that it is never issued again). */
  sealed: string;
  /** Epoch ms after which the token is refused though unused. */
  expiresAt: number;
  spent?: true;
}

export interface BootstrapStore {
  /**
   * Seals `payload` for assignment `id`; returns the one-time token to put in the VM's user_data.
   * With `attempt`, the token is derived (from the key, `id` and `attempt`), so that asking again
   * gives the same user_data (an idempotent create), and an entry issued already is kept as it is:
   * one spent or revoked is never made good again.
   */
  issue(id: string, payload: object, ttlMs: number, attempt?: string): Promise<string>;
  /** The key a token's entry is kept under (its SHA-256): no secret, so a note may name it. */
  keyOf(token: string): Promise<string>;
  /**
   * The key the token `issue` derives for `id` and `attempt` will be kept under, before it is
   * issued: a note names it first, so that a Worker killed between the two leaves no token nobody can revoke.
   */
  derivedKey(id: string, attempt: string): Promise<string>;
  /** Deletes the entry kept under `key` before anyone takes it: true when revoked, false when it was taken (or expired) first. */
  revoke(key: string): Promise<boolean>;
  /**
   * The payload issued for `id` under `token`, once. Undefined when the token is unknown, spent,
   * expired, or issued for another assignment: the caller answers all of these alike.
   */
  take<T>(id: string, token: string): Promise<T | undefined>;
}

export function createBootstraps(kv: KV, key: Uint8Array, now: () => number, previousKey?: Uint8Array): BootstrapStore {
  // Spends an entry at the revision read: true for the one caller whose write lands.
  const spend = async (k: string, found: { value: Entry; revision: number }) => {
    try {
      await kv.update(k, JSON.stringify({ ...found.value, sealed: "", spent: true }), found.revision);
      return true;
    } catch (err) {
      if (isWrongLastSequence(err)) return false;
      throw err;
    }
  };
  return {
    async issue(id, payload, ttlMs, attempt) {
      const token = base64url(attempt === undefined ? crypto.getRandomValues(new Uint8Array(32)) : await deriveBytes(key, `bootstrap token:${id}:${attempt}`));
      const entry: Entry = { id, sealed: await sealJson(key, `bootstrap:${id}`, payload), expiresAt: now() + ttlMs };
      try {
        await kv.create(bootstrapKey(await sha256Key(token)), JSON.stringify(entry));
      } catch (err) {
        if (attempt === undefined || !isWrongLastSequence(err)) throw err;
      }
      return token;
    },
    keyOf: async (token) => bootstrapKey(await sha256Key(token)),
    derivedKey: async (id, attempt) => bootstrapKey(await sha256Key(base64url(await deriveBytes(key, `bootstrap token:${id}:${attempt}`)))),
    async revoke(k) {
      const found = await readJson<Entry>(kv, k);
      return found && !found.value.spent ? spend(k, found) : false;
    },
    async take<T>(id: string, token: string) {
      if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return undefined;
      const k = bootstrapKey(await sha256Key(token));
      const found = await readJson<Entry>(kv, k);
      if (!found || found.value.id !== id || found.value.spent) return undefined;
      if (now() > found.value.expiresAt) {
        await spend(k, found);
        return undefined;
      }
      // Opened before it is spent: an entry no key opens (a rotation without its previous key) stays for a retry.
      const payload = await openJson<T>(key, `bootstrap:${id}`, found.value.sealed, previousKey);
      // Of racing takes, only the one whose write lands at the revision read hands it out.
      return (await spend(k, found)) ? payload : undefined;
    },
  };
}

/** HMAC-SHA256(key, text): a token no one without the key can derive. */
async function deriveBytes(key: Uint8Array, text: string): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode(text)));
}
