/** An error that carries the HTTP status an upstream (a runner backend, Gitea) answered, if any. */
export class UpstreamError extends Error {
  readonly status: number | undefined;
  constructor(message: string, status?: number) {
    super(message);
    this.name = "UpstreamError";
    this.status = status;
  }
}
