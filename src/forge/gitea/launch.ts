// How a workload runs Gitea's runner from its registered identity (FORGE=gitea), as the kubernetes
// and kubevirt drivers are told (RunnerLaunch): the `.runner` file and the claim token in the
// Secret, gitea-runner (or act_runner) for one job, then the completion reported with the claim token.
import type { RunnerFile } from "../../domain/runner-identity.ts";
import type { LaunchInput, RunnerLaunch } from "../../domain/backend.ts";
import { base64 } from "../../model/crypto.ts";

/** Where the Pod mounts the Secret (`.runner`, `claim-token`). */
const SECRET_DIR = "/etc/gitea-runner";

/** Where the runner keeps its `.runner` and works (the image's /data). */
const DATA_DIR = "/data";

/**
 * The runner program: Gitea Runner 2.x is `gitea-runner` (image gitea/runner; the project renamed
 * act_runner on 2026-04-30), act_runner 0.x (gitea/act_runner, frozen at 0.6.1) where it is the
 * only one. Exits 127, saying so, when neither is installed.
 */
export const PICK_RUNNER =
  'R=$(command -v gitea-runner || command -v act_runner) || { echo "gdr: neither gitea-runner nor act_runner is installed" >&2; exit 127; }';

/**
 * How the runner starts from the identity at `secretDir` (`.runner`, `claim-token`), working in
 * `dataDir`: the image registers when `.runner` is missing, so copying the identity in first
 * makes it start straight away; it exits after its one job (ephemeral); complete is then
 * reported, best effort. `.runner` is copied as a regular file only its owner reads (0600): newer
 * runners refuse one that group or other may read, and rewrite it when their labels differ.
 * GITEA_RUNNER_LABELS goes: Gitea Runner 2.x takes it (the default of `daemon --labels`) over the
 * labels `.runner` was registered with, so an image setting it would change them.
 */
export function runScript(secretDir: string, dataDir: string, config = false): string {
  return [
    "set -u",
    PICK_RUNNER,
    "unset GITEA_RUNNER_LABELS",
    `cp ${secretDir}/.runner ${dataDir}/.runner && chmod 600 ${dataDir}/.runner || exit 1`,
    `cd ${dataDir}`,
    config ? `"$R" daemon --config ${secretDir}/config.yaml; rc=$?` : '"$R" daemon; rc=$?',
    `wget -q -O /dev/null --header "Authorization: Bearer $(cat ${secretDir}/claim-token)" --post-data "" "$GDR_COMPLETE_URL" || true`,
    "exit $rc",
  ].join("\n");
}

/**
 * The runner's config file when the Worker serves the cache: cache.external_server, the
 * capability URL act_runner passes verbatim as the job's ACTIONS_CACHE_URL (gitea/act_runner
 * internal/app/run/runner.go). JSON, which is YAML too.
 */
export const cacheConfig = (input: LaunchInput) => (input.cache ? JSON.stringify({ cache: { enabled: true, external_server: input.cache.url } }) : undefined);

export function giteaLaunch(file: RunnerFile, input: LaunchInput): RunnerLaunch {
  const config = cacheConfig(input);
  return {
    files: { ".runner": JSON.stringify(file), "claim-token": input.claimToken, ...(config ? { "config.yaml": config } : {}) },
    mountPath: SECRET_DIR,
    command: ["/bin/sh", "-c", runScript(SECRET_DIR, DATA_DIR, config !== undefined)],
    userData: cloudInit(file, input),
  };
}

/** cloud-init user data: identity and claim token to files (0600), the runner once, then power off. */
function cloudInit(file: RunnerFile, input: LaunchInput): string {
  const dir = "/var/lib/gitea-runner";
  const config = cacheConfig(input);
  const daemon = config ? `"$R" daemon --config ${dir}/config.yaml` : '"$R" daemon';
  return [
    "#cloud-config",
    "write_files:",
    `  - path: ${dir}/.runner`,
    "    permissions: '0600'",
    "    encoding: b64",
    `    content: ${base64(JSON.stringify(file))}`,
    `  - path: ${dir}/claim-token`,
    "    permissions: '0600'",
    "    encoding: b64",
    `    content: ${base64(input.claimToken)}`,
    ...(config ? [`  - path: ${dir}/config.yaml`, "    permissions: '0600'", "    encoding: b64", `    content: ${base64(config)}`] : []),
    "runcmd:",
    `  - [sh, -c, 'cd ${dir} && ${PICK_RUNNER.replaceAll("'", "''")} && unset GITEA_RUNNER_LABELS && ${daemon}; wget -q -O /dev/null --header "Authorization: Bearer $(cat claim-token)" --post-data "" ${JSON.stringify(input.completeUrl)}; poweroff']`,
    "",
  ].join("\n");
}
