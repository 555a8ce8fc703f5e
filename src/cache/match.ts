// Which cache entry a lookup restores: the v1 lookup's keys as @actions/cache 6.3.0 sends them
// (at most 10, each at most 512 characters, no commas: its cache.js checkKey), and GitHub's
// matching ("Dependency caching reference", Cache key matching): in each scope the job may read,
// in order, each key in order: an exact match of a committed entry of the same version, else the
// newest committed entry of that version whose key starts with it. Keys are compared as written
// (case and all); the first scope that has a match answers.

export const MAX_KEYS = 10;
export const MAX_KEY_CHARS = 512;
/** A version is the client's SHA-256 hex of the paths and compression (cacheUtils getCacheVersion); other clients send other hex. */
const VERSION = /^[0-9a-f]{1,128}$/;

/** What a lookup asks: the primary key first, then the restore keys. */
export interface Lookup {
  keys: string[];
  version: string;
}

/** A problem of a lookup's or a reserve's input: its `message` names the field, for a 400. */
export class CacheInputError extends Error {
  override readonly name = "CacheInputError";
}

/** The keys of a lookup's `keys` query parameter (comma-separated, as the client joins them). */
export function parseLookup(keys: string | null | undefined, version: string | null | undefined): Lookup {
  if (!keys) throw new CacheInputError("keys is required: the primary key, then the restore keys, comma-separated");
  const list = keys.split(",");
  if (list.length > MAX_KEYS) throw new CacheInputError(`keys: at most ${MAX_KEYS} keys, not ${list.length}`);
  list.forEach((k, i) => checkKey(k, `keys[${i}]`));
  return { keys: list, version: checkVersion(version) };
}

/** A key to save under: 1-512 characters, no comma (the client refuses the same). */
export function checkKey(key: unknown, field = "key"): string {
  if (typeof key !== "string" || !key) throw new CacheInputError(`${field} is required`);
  if (key.length > MAX_KEY_CHARS) throw new CacheInputError(`${field}: at most ${MAX_KEY_CHARS} characters, not ${key.length}`);
  if (key.includes(",")) throw new CacheInputError(`${field}: a key may not contain a comma`);
  return key;
}

export function checkVersion(version: unknown): string {
  if (typeof version !== "string" || !VERSION.test(version)) throw new CacheInputError("version must be the client's hex digest of the cached paths");
  return version;
}

/** What matching reads of an entry. */
export interface Candidate {
  key: string;
  version: string;
  scope: string;
  /** Epoch ms it was committed: the newest prefix match wins. */
  committedAt: number;
}

/**
 * The entry a lookup restores, or undefined (a miss): `scopes` in the order the job reads them,
 * `entries` the committed entries of its repository (any order; others are ignored).
 */
export function chooseEntry<E extends Candidate>(entries: readonly E[], lookup: Lookup, scopes: readonly string[]): E | undefined {
  for (const scope of scopes) {
    const here = entries.filter((e) => e.scope === scope && e.version === lookup.version);
    for (const key of lookup.keys) {
      const exact = here.find((e) => e.key === key);
      if (exact) return exact;
      const prefixed = here.filter((e) => e.key.startsWith(key));
      if (prefixed.length) return prefixed.reduce((a, b) => (b.committedAt > a.committedAt ? b : a));
    }
  }
  return undefined;
}
