// How an upload's chunks become the parts of one R2 multipart object. @actions/cache 6.3.0 sends
// `Content-Range: bytes <start>-<end>/*` (end inclusive), every chunk S bytes but the last, 4 at
// once in any order, a failed one again with the same range (cacheHttpClient uploadFile); BuildKit's
// client does the same at 32 MiB. R2 takes parts of one size, 5 MiB to 5 GiB, the last one no
// larger, at most 10,000 (developers.cloudflare.com/r2/objects/multipart-objects): so part n is
// bytes [(n-1)·S, n·S), and S is learnt from a chunk that is not the last.
import { CacheInputError } from "./match.ts";

export const MiB = 1024 * 1024;
/** R2's smallest part but the last. */
export const MIN_PART = 5 * MiB;
export const MAX_PART = 5 * 1024 * MiB;
export const MAX_PARTS = 10_000;

/** One chunk's bytes: [start, end], inclusive. */
export interface Range {
  start: number;
  end: number;
}

/** A chunk's Content-Range, `bytes <start>-<end>/<total or *>`; a total, when given, must agree with the reserved size. */
export function parseContentRange(header: string | null | undefined): Range {
  const m = /^bytes (\d{1,15})-(\d{1,15})\/(\*|\d{1,15})$/.exec(header?.trim() ?? "");
  if (!m) throw new CacheInputError("Content-Range must be `bytes <start>-<end>/*`");
  const start = Number(m[1]);
  const end = Number(m[2]);
  if (end < start) throw new CacheInputError(`Content-Range: ${end} is before ${start}`);
  return { start, end };
}

/** The part size the upload is cut at, once known; `size` the reserved size when the client sent one (BuildKit does not). */
export interface Cut {
  partSize?: number | undefined;
  size?: number | undefined;
}

export type Placement = { part: number; partSize: number } | { wait: string };

/**
 * Where a chunk goes: its part number, and the part size it fixes when it is the first full chunk.
 * A chunk that cannot be placed yet (the short last one before any full one) is asked again
 * (`wait`: a 503, which the client retries once after 5 s, when a full chunk has come).
 */
export function placeChunk(cut: Cut, r: Range): Placement {
  const length = r.end - r.start + 1;
  const { size } = cut;
  if (size !== undefined && r.end >= size) throw new CacheInputError(`Content-Range: bytes past the reserved cacheSize (${size})`);
  const lastBySize = size !== undefined && r.end + 1 === size;
  let partSize = cut.partSize;
  if (partSize === undefined) {
    // The first chunk is always a full one, or the only one; so is any chunk but the last.
    if (r.start === 0 || (size !== undefined && !lastBySize)) partSize = length;
    else return { wait: "the upload's part size is not known yet: its first full chunk has not come" };
  }
  // Without a reserved size (BuildKit), a chunk shorter than the others is the last.
  const last = size !== undefined ? lastBySize : length < partSize;
  // A part under R2's minimum may only be the last: a second part shows the first was not.
  if (partSize < MIN_PART && (r.start > 0 || (size !== undefined && !last)))
    throw new CacheInputError(
      `chunks of ${partSize} bytes are under R2's 5 MiB part minimum: set CACHE_UPLOAD_CHUNK_SIZE to at least 5 (MiB) for the cache step`,
    );
  if (partSize > MAX_PART) throw new CacheInputError("chunks above 5 GiB are over R2's part maximum");
  if (r.start % partSize !== 0) throw new CacheInputError(`Content-Range: chunk at ${r.start} is not on a ${partSize}-byte boundary`);
  if (last ? length > partSize : length !== partSize) throw new CacheInputError(`Content-Range: chunks are ${partSize} bytes but the last, not ${length}`);
  const part = r.start / partSize + 1;
  if (part > MAX_PARTS) throw new CacheInputError(`more than ${MAX_PARTS} chunks: raise CACHE_UPLOAD_CHUNK_SIZE`);
  return { part, partSize };
}

/** One uploaded part, as kept until the commit. */
export interface Uploaded {
  part: number;
  size: number;
  etag: string;
}

/**
 * Whether the uploaded parts make exactly `size` bytes: parts 1..n each present once, every one
 * `partSize` but the last, which is no larger and not empty. Returns the problem, or undefined.
 */
export function commitProblem(parts: readonly Uploaded[], partSize: number | undefined, size: number, reserved: number | undefined): string | undefined {
  if (reserved !== undefined && size !== reserved) return `size ${size} is not the reserved cacheSize ${reserved}`;
  if (size === 0) return parts.length ? "size 0 with chunks uploaded" : undefined;
  if (partSize === undefined || !parts.length) return "no chunk was uploaded";
  const n = Math.ceil(size / partSize);
  const sorted = [...parts].sort((a, b) => a.part - b.part);
  if (sorted.length !== n || sorted.some((p, i) => p.part !== i + 1)) return `the chunks do not cover 0-${size - 1} once each (${sorted.length} of ${n})`;
  const expected = (p: number) => (p < n ? partSize : size - (n - 1) * partSize);
  const wrong = sorted.find((p) => p.size !== expected(p.part));
  return wrong ? `chunk ${wrong.part} holds ${wrong.size} bytes, not ${expected(wrong.part)}` : undefined;
}
