// How the forge's poller fares, kept durably so that every isolate's /metrics agrees: failures in
// total, and whether the last poll failed (since when, and why; a reason names a status and a
// path, never a token).
import type { KV } from "@nats-io/kv";
import { FORGE_HEALTH_KEY } from "../nats/names.ts";

export interface ForgeHealth {
  failuresTotal: number;
  /** Epoch ms of the first failure of the current streak; absent when the last poll succeeded. */
  failingSince?: number;
  reason?: string;
}

export interface ForgeHealthStore {
  get(): Promise<ForgeHealth | null>;
  put(health: ForgeHealth): Promise<void>;
}

export function createForgeHealthStore(kv: KV): ForgeHealthStore {
  return {
    async get() {
      const entry = await kv.get(FORGE_HEALTH_KEY);
      return entry && entry.operation === "PUT" ? entry.json<ForgeHealth>() : null;
    },
    async put(health) {
      await kv.put(FORGE_HEALTH_KEY, JSON.stringify(health));
    },
  };
}
