// The cache's index: what entries there are, under which name, and which parts of an upload have
// come. Kept in NATS KV (kv-index.ts) so that every isolate and every invocation sees one index;
// an entry's bytes are in R2 (blobs.ts) under the key its entry names. Entries are immutable once
// committed, and one name (repository, scope, version, key) has one entry: the first reserve wins.
import type { Uploaded } from "./parts.ts";

export interface CacheEntry {
  /** The client's cacheId: a JSON number ≥ 1 (a 0 is taken for a failed reserve). */
  id: number;
  repo: string;
  scope: string;
  key: string;
  version: string;
  state: "reserved" | "committed";
  /** The reserve's cacheSize (when the client sent one), then the committed size. */
  size?: number | undefined;
  /** Set by the first full chunk (parts.ts). */
  partSize?: number | undefined;
  /** The R2 multipart upload of a reserved entry ("" until it is started). */
  upload: string;
  /** The assignment whose job reserved it (not a secret). */
  holder: string;
  reservedAt: number;
  committedAt?: number | undefined;
  /** Epoch ms of its latest restore (or its commit): the least recently used go first. */
  usedAt: number;
}

export interface Versioned<T> {
  value: T;
  revision: number;
}

/** A name's entry, for a lookup: its key as written, and its id. */
export interface Named {
  key: string;
  id: number;
}

export interface CacheIndex {
  /**
   * Writes a new entry under its name, unless the name holds one already: then that one is
   * answered (`taken`) and nothing is written. "id-taken": its id is another entry's (pick another).
   */
  reserve(entry: CacheEntry): Promise<{ entry: CacheEntry } | { taken: CacheEntry } | "id-taken">;
  get(repo: string, id: number): Promise<Versioned<CacheEntry> | undefined>;
  /** Writes `entry` at `revision`; false when another writer came first (nothing written). */
  update(entry: CacheEntry, revision: number): Promise<boolean>;
  /** The names of a scope and version, with their entries' ids (any state). */
  named(repo: string, scope: string, version: string): Promise<Named[]>;
  /** Many entries of a repository at once. */
  entries(repo: string, ids: readonly number[]): Promise<Map<number, Versioned<CacheEntry>>>;
  /** Every entry of a repository (eviction, the status). */
  all(repo: string): Promise<CacheEntry[]>;
  /** The repositories that have entries. */
  repos(): Promise<string[]>;
  /** Notes an uploaded part (a part sent again replaces its note). */
  putPart(repo: string, id: number, part: Uploaded): Promise<void>;
  parts(repo: string, id: number): Promise<Uploaded[]>;
  /** The entry, its name (if it is still this entry's) and its parts' notes go. */
  remove(entry: CacheEntry): Promise<void>;
}

/** A random cacheId: 1 to 2^48, a safe JSON number. */
export function newCacheId(): number {
  const [a, b] = crypto.getRandomValues(new Uint32Array(2));
  return (a! % 0x10000) * 0x100000000 + b! + 1;
}
