// Forgejo lists a job with its repository's id only. Its name comes from `GET /repositories/{id}`
// (repoGetByID): one request per repository, kept NAME_TTL_MS so that a rename shows within
// minutes. A lookup that fails (404, 403, no answer, a name no store can key) costs no job its
// runner: the name known before stands, else the ids (`id-<owner>/id-<repo>`), and it is asked
// again after FAILED_RETRY_MS.
import { repositorySchema } from "../../model/assignment.ts";
import type { EventSink } from "../../model/events.ts";
import type { ForgejoClient, ForgejoJob, ForgejoScope } from "./client.ts";
import { repositoryOfJob } from "./jobs.ts";

export const NAME_TTL_MS = 10 * 60_000;
export const FAILED_RETRY_MS = 60_000;

/** A repository's name as last looked up (`failed`: the lookup did not answer one; `name` is what stands meanwhile). */
export interface KnownName {
  name: string;
  at: number;
  failed?: true;
}

/** Where names are kept between polls (the poller object's storage). */
export interface NameStore {
  get(repoId: number): Promise<KnownName | undefined>;
  put(repoId: number, known: KnownName): Promise<void>;
}

export function memoryNames(): NameStore {
  const names = new Map<number, KnownName>();
  return { get: (id) => Promise.resolve(names.get(id)), put: (id, n) => Promise.resolve(void names.set(id, n)) };
}

/** The repository of each of `jobs`, by repository id: "owner/name" where the scope or Forgejo says it. */
export async function repositoryNames(
  jobs: readonly ForgejoJob[],
  scope: ForgejoScope,
  client: Pick<ForgejoClient, "repositoryName">,
  store: NameStore,
  now: number,
  sink: EventSink,
): Promise<Map<number, string>> {
  const out = new Map<number, string>();
  const ids = [...new Set(jobs.map((j) => j.repo_id ?? 0))];
  await Promise.all(
    ids.map(async (id) => {
      const job = jobs.find((j) => (j.repo_id ?? 0) === id)!;
      const fallback = repositoryOfJob(scope, job);
      // A repository scope names its one repository; an unknown id (0) has no name to ask for.
      if (scope.kind === "repo" || id === 0) return void out.set(id, fallback);
      const known = await store.get(id);
      if (known && now - known.at < (known.failed ? FAILED_RETRY_MS : NAME_TTL_MS)) return void out.set(id, known.name);
      type Looked = { name: string; reason?: undefined } | { name?: undefined; reason: string };
      const looked = await client.repositoryName(id).then(
        (name): Looked =>
          name !== null && repositorySchema.safeParse(name).success
            ? { name }
            : { reason: name === null ? "Forgejo has no such repository the token sees (404)" : "its name is not owner/name of Forgejo's characters" },
        (err: unknown): Looked => ({ reason: (err as Error).message }),
      );
      if (looked.name !== undefined) {
        await store.put(id, { name: looked.name, at: now });
        return void out.set(id, looked.name);
      }
      const standing = known?.name ?? fallback;
      if (!known?.failed) sink.error("forgejo repository name lookup failed", { repository: id, reason: looked.reason, standing });
      await store.put(id, { name: standing, at: now, failed: true });
      out.set(id, standing);
    }),
  );
  return out;
}
