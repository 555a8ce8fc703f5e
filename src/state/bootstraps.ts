// One-time bootstraps: what a VM fetches at its first boot (its runner identity and claim token),
// sealed at rest and handed out once. The VM's user_data carries only a random token; the entry
// is kept in the records bucket under the SHA-256 of that token, and taking it deletes it at the
// revision read, so a second fetch, or a racing one, finds nothing. user_data may outlive the boot
// (a rebuild keeps it unless given another); the token in it is spent by then.
import type { KV } from "@nats-io/kv";
import { base64url, openJson, sealJson, sha256Key } from "../model/crypto.ts";
import { bootstrapKey } from "../nats/names.ts";
import { deleteAtRevision, readJson } from "./kv.ts";

interface Entry {
  id: string;
  sealed: string;
  /** Epoch ms after which the token is refused though unused. */
  expiresAt: number;
}

export interface BootstrapStore {
  /** Seals `payload` for assignment `id`; returns the one-time token to put in the VM's user_data. */
  issue(id: string, payload: object, ttlMs: number): Promise<string>;
  /** The key a token's entry is kept under (its SHA-256): no secret, so a note may name it. */
  keyOf(token: string): Promise<string>;
  /** Deletes the entry kept under `key` before anyone takes it: true when revoked, false when it was taken (or expired) first. */
  revoke(key: string): Promise<boolean>;
  /**
   * The payload issued for `id` under `token`, once. Undefined when the token is unknown, spent,
   * expired, or issued for another assignment: the caller answers all of these alike.
   */
  take<T>(id: string, token: string): Promise<T | undefined>;
}

export function createBootstraps(kv: KV, key: Uint8Array, now: () => number, previousKey?: Uint8Array): BootstrapStore {
  return {
    async issue(id, payload, ttlMs) {
      const token = base64url(crypto.getRandomValues(new Uint8Array(32)));
      const entry: Entry = { id, sealed: await sealJson(key, `bootstrap:${id}`, payload), expiresAt: now() + ttlMs };
      await kv.create(bootstrapKey(await sha256Key(token)), JSON.stringify(entry));
      return token;
    },
    keyOf: async (token) => bootstrapKey(await sha256Key(token)),
    async revoke(k) {
      const found = await readJson<Entry>(kv, k);
      return found ? deleteAtRevision(kv, k, found.revision) : false;
    },
    async take<T>(id: string, token: string) {
      if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return undefined;
      const k = bootstrapKey(await sha256Key(token));
      const found = await readJson<Entry>(kv, k);
      if (!found || found.value.id !== id) return undefined;
      const spend = () => deleteAtRevision(kv, k, found.revision);
      if (now() > found.value.expiresAt) {
        await spend();
        return undefined;
      }
      // Opened before it is spent: an entry no key opens (a rotation without its previous key) stays for a retry.
      const payload = await openJson<T>(key, `bootstrap:${id}`, found.value.sealed, previousKey);
      // Of racing takes, only the one whose delete lands at the revision read hands it out.
      return (await spend()) ? payload : undefined;
    },
  };
}
