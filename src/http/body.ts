import { HttpError } from "./errors.ts";

/** `application/json`, with parameters (`; charset=utf-8`) or none: not `application/json-patch+json`. */
export function isJsonContentType(type: string | null): boolean {
  return /^application\/json[ \t]*(;.*)?$/i.test((type ?? "").trim());
}

/** Refuses, with 415, a request whose body is declared as anything but JSON. */
export function requireJsonContentType(req: Request, hint = ""): void {
  if (!isJsonContentType(req.headers.get("content-type"))) throw new HttpError(415, `content-type must be application/json${hint}`);
}

/** Reads a JSON request body of at most `maxBytes`, stopping as soon as the limit is passed. */
export async function readJsonBody(req: Request, maxBytes: number): Promise<unknown> {
  requireJsonContentType(req);
  const bytes = await readLimited(req, maxBytes);
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new HttpError(400, "body is not valid JSON", [{ field: "(body)", message: "not valid JSON" }]);
  }
}

export async function readLimited(req: Request, maxBytes: number): Promise<Uint8Array> {
  const tooLarge = () => new HttpError(413, `body larger than ${maxBytes} bytes`);
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (declared > maxBytes) throw tooLarge();
  if (!req.body) return new Uint8Array();
  const reader = (req.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw tooLarge();
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const c of chunks) {
    out.set(c, offset);
    offset += c.byteLength;
  }
  return out;
}
