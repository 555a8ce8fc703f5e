// Compare-and-set helpers over a JetStream KV bucket holding JSON values.
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsHandle } from "../nats/connection.ts";

export interface Versioned<T> {
  value: T;
  revision: number;
}

/** Binds to an existing bucket without a round trip; the Worker never creates buckets. */
export function bindBucket(handle: NatsHandle, bucket: string): Promise<KV> {
  return new Kvm(handle.js).open(bucket, { allow_direct: true });
}

export async function readJson<T>(kv: KV, key: string): Promise<Versioned<T> | null> {
  const entry = await kv.get(key);
  if (!entry || entry.operation !== "PUT" || entry.length === 0) return null;
  return { value: entry.json<T>(), revision: entry.revision };
}

export function isWrongLastSequence(err: unknown): boolean {
  const e = err as { code?: number; api_error?: { err_code?: number }; message?: string };
  return e?.api_error?.err_code === 10071 || /wrong last sequence/i.test(e?.message ?? "");
}

const MAX_CAS_ATTEMPTS = 30;

/**
 * Applies `change` to the current value with compare-and-set, retrying on a concurrent writer.
 * `change` returns the new value, or undefined to leave the entry as it is.
 */
export async function casUpdate<T, R>(
  kv: KV,
  key: string,
  change: (current: Versioned<T> | null) => { value: T | undefined; result: R },
): Promise<R> {
  for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
    const current = await readJson<T>(kv, key);
    const { value, result } = change(current);
    if (value === undefined) return result;
    const bytes = new TextEncoder().encode(JSON.stringify(value));
    try {
      if (current) await kv.update(key, bytes, current.revision);
      else await kv.create(key, bytes);
      return result;
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
      // Another writer won; back off a little so that many contenders spread out.
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));
    }
  }
  throw new Error(`KV ${key}: gave up after ${MAX_CAS_ATTEMPTS} concurrent updates`);
}
