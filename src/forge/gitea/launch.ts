// How a workload runs act_runner from its registered identity (FORGE=gitea), as the kubernetes
// and kubevirt drivers are told (RunnerLaunch): the `.runner` file and the claim token in the
// Secret, act_runner for one job, then the completion reported with the claim token.
import type { RunnerFile } from "../../domain/runner-identity.ts";
import type { LaunchInput, RunnerLaunch } from "../../domain/backend.ts";
import { base64 } from "../../model/crypto.ts";

/** Where the Pod mounts the Secret (`.runner`, `claim-token`). */
const SECRET_DIR = "/etc/gitea-runner";

// act_runner's image registers when /data/.runner is missing; copying the identity in first makes it
// start straight away. It exits after its one job (ephemeral); complete is then reported, best effort.
const RUN_SCRIPT = [
  "set -u",
  `cp ${SECRET_DIR}/.runner /data/.runner`,
  "cd /data",
  "act_runner daemon; rc=$?",
  `wget -q -O /dev/null --header "Authorization: Bearer $(cat ${SECRET_DIR}/claim-token)" --post-data "" "$GDR_COMPLETE_URL" || true`,
  "exit $rc",
].join("\n");

export function giteaLaunch(file: RunnerFile, input: LaunchInput): RunnerLaunch {
  return {
    files: { ".runner": JSON.stringify(file), "claim-token": input.claimToken },
    mountPath: SECRET_DIR,
    command: ["/bin/sh", "-c", RUN_SCRIPT],
    userData: cloudInit(file, input),
  };
}

/** cloud-init user data: identity and claim token to files (0600), act_runner once, then power off. */
function cloudInit(file: RunnerFile, input: LaunchInput): string {
  return [
    "#cloud-config",
    "write_files:",
    "  - path: /var/lib/act_runner/.runner",
    "    permissions: '0600'",
    "    encoding: b64",
    `    content: ${base64(JSON.stringify(file))}`,
    "  - path: /var/lib/act_runner/claim-token",
    "    permissions: '0600'",
    "    encoding: b64",
    `    content: ${base64(input.claimToken)}`,
    "runcmd:",
    `  - [sh, -c, 'cd /var/lib/act_runner && act_runner daemon; wget -q -O /dev/null --header "Authorization: Bearer $(cat claim-token)" --post-data "" ${JSON.stringify(input.completeUrl)}; poweroff']`,
    "",
  ].join("\n");
}
