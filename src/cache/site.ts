// What the cache's routes (http/cache-routes.ts) need of one request's Worker, built by the wiring
// (app/cache-site.ts): its key, its stores, and how a holder's job is found.
import type { Holder } from "./capability.ts";
import type { Signed } from "./forgejo-mac.ts";
import type { CacheDeps, CacheJob } from "./service.ts";
import type { CacheCount } from "./figures.ts";

/** What the routes need of one request's Worker. */
export interface CacheSite {
  key: Uint8Array;
  publicUrl: string;
  /** Runs `fn` with the cache's stores on the request's connection. */
  open<T>(fn: (d: CacheDeps) => Promise<T>): Promise<T>;
  /** The job a holder runs now, as each forge tells it; a CacheRefusal when it runs none (ended, unknown, not yet bound). */
  job(holder: Holder, forgejo?: Signed): Promise<CacheJob>;
  /** Forgejo: the job's own cache.secret. */
  secret(holder: Holder): Promise<string>;
  now(): number;
  /** One line per refusal and per save or restore: no credential in it. */
  log(e: CacheEvent): void;
  /** Counts for the repository's figures (figures.ts), after the answer: never fails the request. */
  count(repo: string, c: CacheCount): void;
}

export interface CacheEvent {
  event: "cache_hit" | "cache_miss" | "cache_saved" | "cache_refused";
  assignment: string;
  repository?: string;
  bytes?: number;
  reason?: string;
}
