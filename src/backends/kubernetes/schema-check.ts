// Checks a manifest against Kubernetes' and KubeVirt's own API descriptions (upstream/, trimmed
// copies), so that a pool template that would make an invalid Pod or VMI is refused when the
// configuration is read, not by the API server at the first job.
import k8sCore from "./upstream/k8s-core-v1.json" with { type: "json" };
import kubevirt from "./upstream/kubevirt-v1.json" with { type: "json" };
import { checkAgainst } from "../api-schema.ts";

export { checkAgainst };

export const checkPod = (manifest: unknown) => checkAgainst(k8sCore, "io.k8s.api.core.v1.Pod", manifest);
export const checkVmi = (manifest: unknown) => checkAgainst(kubevirt, "v1.VirtualMachineInstance", manifest);
