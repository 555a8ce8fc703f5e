// The answers of the HTTP API as zod schemas: the OpenAPI document is generated from these and
// from the request schemas the handlers parse with (assignment.ts, gitea/webhook.ts).
import { z } from "zod";
import { ASSIGNMENT_STATES, BACKEND_NAME } from "../nats/names.ts";
import { START_VIAS } from "../state/record.ts";

export const errorBody = z
  .object({
    error: z.string(),
    fields: z.array(z.object({ field: z.string(), message: z.string() })).optional(),
  })
  .meta({ id: "Error", description: "What went wrong; `fields` names the failing input fields." });

export const publishedBody = z.object({ id: z.string(), stream: z.string(), seq: z.number().int(), duplicate: z.boolean() }).meta({ id: "Published" });

const backendName = z.string().regex(BACKEND_NAME).meta({ description: "a backend's name: pod, vm, or one named in BACKENDS" });
const timestamp = z.string().meta({ format: "date-time" });
export const assignmentView = z
  .object({
    id: z.string(),
    backend: backendName,
    state: z.enum(ASSIGNMENT_STATES),
    createdAt: timestamp,
    receivedAt: timestamp,
    updatedAt: timestamp,
    readyAt: timestamp.nullable(),
    claimedAt: timestamp.nullable(),
    completedAt: timestamp.nullable(),
    terminatedAt: timestamp.nullable(),
    reason: z.string().nullable(),
    giteaRunnerId: z.number().int().nullable(),
    giteaRunnerScope: z
      .string()
      .nullable()
      .meta({ description: "Where in Gitea its runner is registered (RUNNER_SCOPE): org:<name>, user:<name> or repo:<owner>/<name>; null for GITEA_SCOPE" }),
    pool: z.string().nullable().meta({ description: "The runner pool that admitted it (RUNNER_POOLS), once admitted" }),
    warm: z.boolean().meta({ description: "Its runner is kept warm for its pool, for any job" }),
    handle: z.string().nullable().meta({
      description:
        "FORGE=forgejo: the handle of the job attempt its runner runs (its own job's, or the one a warm runner was given); null with Gitea, or a warm runner not given one yet",
    }),
    replaced: z.number().int().nonnegative().meta({ description: "Runners replaced after their machine was taken back before the claim" }),
    interrupted: z
      .object({ at: timestamp, notice: timestamp, claimed: z.boolean(), by: z.enum(["runner", "sweep"]) })
      .nullable()
      .meta({ description: "Its latest runner's interruption (a Spot notice): when reported, the notice's time, whether its job had started, and who told" }),
  })
  .meta({ id: "Assignment" });

export const healthBody = z
  .object({
    ok: z.boolean(),
    nats: z.object({ ok: z.boolean() }).optional(),
    problems: z.array(z.string()),
    warnings: z.array(z.string()).optional().describe("What works, but not as configured (a missing NATS gateway binding)."),
    cache: z.object({ on: z.boolean() }).optional().describe("Whether the Actions cache is served (a CACHE_BUCKET binding)."),
    error: z.string().optional(),
    forge: z
      .object({
        kind: z.enum(["gitea", "forgejo"]),
        version: z.string().optional(),
        servedAs: z.string().optional().describe("Gitea: why a release this dispatcher does not know is served as the newest it knows."),
        ok: z.boolean(),
      })
      .optional()
      .describe("The version the forge reports (Gitea: the release served, GITEA_VERSION when set), read at start-up and every 10 minutes."),
    stream: z.object({ name: z.string(), messages: z.number().int(), replicas: z.number().int(), leader: z.string().optional() }).optional(),
    consumers: z.record(z.string(), z.object({ pending: z.number().int(), ackPending: z.number().int(), redelivered: z.number().int() })).optional(),
  })
  .meta({ id: "Health" });

const count = z.number().int().nonnegative();
export const statusBody = z
  .object({
    at: timestamp,
    stream: z.object({ messages: count, published: count, acked: count }),
    backends: z.array(
      z.object({
        backend: backendName,
        capacity: count,
        slotsInUse: count,
        registering: count,
        queued: count,
        ackPending: count,
        redelivered: count,
        waitingForCapacity: count,
        waitingForQuota: count.meta({ description: "In the wait set, held back by a QUOTAS limit of their owner or repository" }),
        pendingAtBackend: count,
        readyForClaim: count,
        running: count,
        delivered: count,
      }),
    ),
    pools: z.array(
      z.object({
        pool: z.string(),
        backend: backendName,
        target: count.meta({ description: "Warm runners it keeps now (minIdle, or its schedule window's)" }),
        maxRunners: count.nullable(),
        idle: count,
        busy: count,
        booting: count,
        warm: count.meta({ description: "Of idle and booting, those kept warm" }),
        warmByReuse: count
          .optional()
          .meta({ description: 'Of the warm ones, those rebuilt on a finished job\'s server within its paid hour (reuse: "rebuild")' }),
        startup: z
          .object({
            buckets: z.array(count),
            sum: z.number().nonnegative(),
            count,
            bootGiveUps: count.optional(),
            launchesMissed: count.optional(),
            via: z
              .partialRecord(z.enum(START_VIAS), z.object({ buckets: z.array(count), sum: z.number().nonnegative(), count }))
              .optional()
              .meta({
                description:
                  "The same start-ups by how the runner came: reuse (warm by reuse), rebuilt (a parked server rebuilt for the job), warm (a warm runner on a new machine), new",
              }),
          })
          .nullable()
          .meta({
            description:
              "Job start-up times (seconds): cumulative counts per bucket of 1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600 s",
          }),
      }),
    ),
    owners: z.array(z.object({ owner: z.string(), runners: count, waitingForCapacity: count, waitingForQuota: count })).meta({
      description:
        "The STATUS_TOP_OWNERS owners holding most runners, then `other` for the rest (and an owner named so); `-` is jobs with no repository, `pool <name>` a pool's warm runners without a job",
    }),
    cloud: z
      .array(
        z.object({
          backend: backendName,
          driver: z.string().meta({ description: "Its driver: hetzner (servers, a project) or ec2 (instances, an account)" }),
          full: z.boolean().meta({ description: "The cloud project's server limit (EC2: the account's instance or vCPU limit) holds its creates back now" }),
          fullTotal: count,
          swept: count.meta({ description: "Servers (instances) its sweep deleted (orphans, ended assignments', past their lifetime)" }),
          rate: z.object({ limit: count, remaining: count }).optional().meta({ description: "The cloud API's rate budget at the last sweep" }),
          paid: z
            .array(z.object({ pool: z.string(), servers: count, used: z.number().nonnegative(), givenUp: z.number().nonnegative() }))
            .optional()
            .meta({
              description:
                "Hetzner (billed by the started hour): paid seconds of the servers deleted, by pool ('-': none): used (creation to delete) and givenUp (the rest of the hour each was deleted in)",
            }),
        }),
      )
      .meta({ description: "Backends of a cloud driver (hetzner, ec2): what the driver counted" }),
    cache: z
      .array(
        z.object({
          repository: z.string(),
          figures: z.object({
            hits: count,
            misses: count,
            bytesIn: count,
            bytesOut: count,
            evictions: count,
            refused: z.record(z.string(), count),
            entries: count,
            bytesStored: count,
          }),
        }),
      )
      .optional()
      .meta({ description: "The Actions cache per repository, while it is on (a CACHE_BUCKET binding)" }),
    problems: z.array(z.string()),
    recent: z.array(
      z.object({
        id: z.string(),
        backend: z.string(),
        state: z.enum(ASSIGNMENT_STATES),
        repository: z.string().nullable(),
        job: z.string().nullable(),
        createdAt: timestamp,
        updatedAt: timestamp,
        ageSeconds: count,
        runner: z.string().nullable(),
        note: z.string().nullable().meta({
          description:
            'What happened, where the state alone misleads: "ran on warm runner <id>" for a job a warm runner ran, "warm runner of pool <name>" (and the job it ran or was given) for a warm runner',
        }),
      }),
    ),
  })
  .meta({ id: "Status" });

const seconds = z.number().nonnegative();
const usageFigures = {
  jobs: count.meta({ description: "Jobs queued in the window" }),
  runnerSeconds: seconds.meta({ description: "From each runner asked of the backend to its job's end (or now)" }),
  queuedToRunning: z
    .object({ count, meanSeconds: seconds.nullable(), p50Seconds: seconds.nullable(), p95Seconds: seconds.nullable() })
    .meta({ description: "From queued to in_progress, over the window's jobs a runner took" }),
};
export const usageBody = z
  .object({
    since: timestamp,
    until: timestamp,
    owners: z.array(z.object({ owner: z.string(), ...usageFigures, repositories: z.array(z.object({ repository: z.string(), ...usageFigures })) })),
    scanned: count.meta({ description: "Records read" }),
    truncated: z.boolean().meta({ description: "The scan stopped at 50,000 records: ask for a narrower window" }),
  })
  .meta({ id: "Usage" });

/**
 * What a webhook delivery did: queued an assignment, claimed, completed or cancelled one, left a
 * tombstone for a job that ended before its queued came, or nothing and why.
 */
export const webhookBody = z
  .union([
    z.object({ assignment: z.string(), duplicate: z.boolean() }),
    z.object({ claimed: z.string() }),
    z.object({ completed: z.string() }),
    z.object({ cancelled: z.string() }),
    z.object({ tombstone: z.string() }),
    z.object({ ignored: z.string() }),
  ])
  .meta({ id: "WebhookOutcome" });

/** What a Forgejo run-level delivery did: the poller looks now, or nothing and why. */
export const forgejoWebhookBody = z
  .union([z.object({ run: z.number().int(), polled: z.literal(true) }), z.object({ ignored: z.string() })])
  .meta({ id: "ForgejoWebhookOutcome" });
