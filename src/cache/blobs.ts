// Where the cache's bytes are: one R2 object per committed entry, written as a multipart upload
// whose parts are the client's chunks (parts.ts), read whole or by range. Streams throughout: a
// chunk goes to R2 through a FixedLengthStream of its Content-Range's length (R2 takes a stream
// only of a known length), so no chunk is ever held whole in the Worker's memory.

export interface Blob {
  body: ReadableStream<Uint8Array>;
  /** The whole object's size. */
  size: number;
  /** The bytes sent: [offset, offset + length). */
  offset: number;
  length: number;
}

export interface Blobs {
  /** A new multipart upload of `key`: its id. */
  start(key: string): Promise<string>;
  /** One part of `length` bytes from `body`: its etag. A part sent again replaces it. */
  putPart(key: string, upload: string, part: number, body: ReadableStream<Uint8Array>, length: number): Promise<string>;
  finish(key: string, upload: string, parts: readonly { part: number; etag: string }[]): Promise<void>;
  abort(key: string, upload: string): Promise<void>;
  /** The object, or the bytes from `offset` (to `offset + length`); undefined when there is none. */
  read(key: string, range?: { offset: number; length?: number | undefined }): Promise<Blob | undefined>;
  /** The object's size, or undefined when there is none. */
  size(key: string): Promise<number | undefined>;
  remove(keys: readonly string[]): Promise<void>;
  /** One page of the keys under `prefix`. */
  list(prefix: string, cursor?: string): Promise<{ keys: { key: string; uploaded: number }[]; cursor?: string | undefined }>;
}

/** The object key of an entry: under its repository, so that a listing finds one repository's. */
export const blobKey = (repo: string, id: number) => `cache/${repo}/${id}`;

export function r2Blobs(bucket: R2Bucket): Blobs {
  return {
    async start(key) {
      return (await bucket.createMultipartUpload(key, { httpMetadata: { contentType: "application/octet-stream" } })).uploadId;
    },
    async putPart(key, upload, part, body, length) {
      const fixed = new FixedLengthStream(length);
      const piped = body.pipeTo(fixed.writable);
      const [uploaded] = await Promise.all([bucket.resumeMultipartUpload(key, upload).uploadPart(part, fixed.readable), piped]);
      return uploaded.etag;
    },
    async finish(key, upload, parts) {
      await bucket.resumeMultipartUpload(key, upload).complete(parts.map((p) => ({ partNumber: p.part, etag: p.etag })));
    },
    async abort(key, upload) {
      await bucket.resumeMultipartUpload(key, upload).abort();
    },
    async read(key, range) {
      const object = await bucket.get(
        key,
        range ? { range: range.length === undefined ? { offset: range.offset } : { offset: range.offset, length: range.length } } : {},
      );
      if (!object || !("body" in object)) return undefined;
      const offset = range?.offset ?? 0;
      return { body: object.body as ReadableStream<Uint8Array>, size: object.size, offset, length: range?.length ?? object.size - offset };
    },
    async size(key) {
      return (await bucket.head(key))?.size;
    },
    async remove(keys) {
      for (let i = 0; i < keys.length; i += 1000) await bucket.delete(keys.slice(i, i + 1000));
    },
    async list(prefix, cursor) {
      const page = await bucket.list({ prefix, limit: 1000, ...(cursor ? { cursor } : {}) });
      return { keys: page.objects.map((o) => ({ key: o.key, uploaded: o.uploaded.getTime() })), cursor: page.truncated ? page.cursor : undefined };
    },
  };
}
